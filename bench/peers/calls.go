package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend"
	"github.com/ratelimit-go/ratelimit/internal/rediscore/lua"
	"github.com/ratelimit-go/ratelimit/servertest/serverinfo"
)

// The scripts as real calls (-scripts, after the loop): each row sends
// callsPerRound commands in pipelines of callsPerPipeline, over callKeys
// keys at callLimit per second each (so that most keys are at their limit,
// as under abuse, and redis_rate skips its write as ours do), and reads
// the server's time per call from INFO commandstats. The parsing of each
// command, its arguments and the call of the script or function are in;
// the network and the client are not. Rows take turns, round after round;
// each one's fastest round is reported.
const (
	callsPerRound    = 40_000
	callsPerPipeline = 100
	callKeys         = 1000
	callLimit        = 20
)

// callRow is one way to decide: the command name INFO reports it under, and
// the words of a call on key i.
type callRow struct {
	name, cmd string
	words     func(i int) []any
}

// callRows are redis_rate's EVALSHA, then each algorithm's by EVALSHA and
// by FCALL.
func callRows(rateSHA string) []callRow {
	rows := []callRow{{name: redisRate + " EVALSHA", cmd: "evalsha", words: func(i int) []any {
		return []any{"evalsha", rateSHA, 1, "calls:rr:{" + strconv.Itoa(i) + "}", callLimit, callLimit, 1, 1}
	}}}
	for _, alg := range backend.Algorithms() {
		burst := int64(0)
		if alg == ratelimit.GCRA {
			burst = callLimit
		}
		rule, err := backend.NewRule(alg, callLimit, time.Second, burst, time.Second, "calls:ours:")
		if err != nil {
			panic(err) // a constant policy
		}
		words := func(head []any, i int) []any {
			req := backend.Request{Rule: rule, Key: strconv.Itoa(i), Cost: 1}
			keys := lua.Keys(req)
			w := append(head, len(keys))
			for _, k := range keys {
				w = append(w, k)
			}
			for _, a := range lua.Args(req, lua.Take) {
				w = append(w, a)
			}
			return w
		}
		sha, fn := lua.For(alg).SHA1, lua.Function(alg)
		rows = append(rows,
			callRow{name: "ratelimit " + alg.String() + " EVALSHA", cmd: "evalsha", words: func(i int) []any { return words([]any{"evalsha", sha}, i) }},
			callRow{name: "ratelimit " + alg.String() + " FCALL", cmd: "fcall", words: func(i int) []any { return words([]any{"fcall", fn}, i) }})
	}
	return rows
}

// runCalls loads the scripts and the library on the server of c, measures
// callRows rounds times each, and prints the fastest round of each.
func runCalls(ctx context.Context, c *goredis.Client, rateText string, rounds int, out, progress io.Writer) error {
	rateSHA, err := c.ScriptLoad(ctx, rateText).Result()
	if err != nil {
		return err
	}
	for _, l := range lua.Scripts() {
		if err := c.ScriptLoad(ctx, l.Text).Err(); err != nil {
			return err
		}
	}
	if err := c.FunctionLoad(ctx, lua.Library).Err(); !lua.LibraryLoaded(err) {
		return fmt.Errorf("FUNCTION LOAD: %w", err)
	}
	rows := callRows(rateSHA)
	best := make([]float64, len(rows))
	rng := rand.New(rand.NewPCG(1, 2))
	for r := range rounds {
		fmt.Fprintf(progress, "calls: round %d/%d\n", r+1, rounds)
		for j := range rows {
			i := (j + r) % len(rows)
			us, err := callRound(ctx, c, rows[i], rng)
			if err != nil {
				return fmt.Errorf("%s: %w", rows[i].name, err)
			}
			if best[i] == 0 || us < best[i] {
				best[i] = us
			}
		}
	}
	ref := best[slices.IndexFunc(rows, func(r callRow) bool { return r.cmd == "evalsha" && r.name == redisRate+" EVALSHA" })]
	fmt.Fprintf(out, "\nthe scripts as calls: %d commands in pipelines of %d over %d keys at %d per second, server time per call (INFO commandstats), fastest of %d rounds\n",
		callsPerRound, callsPerPipeline, callKeys, callLimit, rounds)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "call\tµs/decision\tvs redis_rate\t")
	for i, row := range rows {
		fmt.Fprintf(w, "%s\t%.2f\t%.2fx\t\n", row.name, best[i], best[i]/ref)
	}
	return w.Flush()
}

// callRound sends one round of row's calls and returns the server's time
// per call.
func callRound(ctx context.Context, c *goredis.Client, row callRow, rng *rand.Rand) (float64, error) {
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		return 0, err
	}
	for sent := 0; sent < callsPerRound; sent += callsPerPipeline {
		pipe := c.Pipeline()
		for range callsPerPipeline {
			pipe.Do(ctx, row.words(rng.IntN(callKeys))...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
	}
	stats, err := serverinfo.CommandStats(ctx, c)
	if err != nil {
		return 0, err
	}
	st := stats[row.cmd]
	if st.Calls < callsPerRound {
		return 0, fmt.Errorf("the server counted %d %s calls of %d", st.Calls, row.cmd, callsPerRound)
	}
	return float64(st.Usec) / float64(st.Calls), nil
}
