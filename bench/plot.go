package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/backend/memory"
)

const plotBins = 30 // three windows, in tenths

// burst simulates, on the memory store with a manual clock, a client that
// is idle until 0.9 of a window and then asks every window/2000 until three
// windows have passed; it returns the requests admitted per tenth of a window.
func burst(alg ratelimit.Algorithm, limit int, window time.Duration) ([]int, error) {
	st, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	start := time.Unix(0, 0).Add(time.Duration(time.Now().Unix()/3600*3600) * time.Second) // window-aligned
	now := start
	l, err := ratelimit.New(st, ratelimit.NewPolicy(alg, limit, window), ratelimit.WithCallerClock(func() time.Time { return now }))
	if err != nil {
		return nil, err
	}
	bins := make([]int, plotBins)
	step := window / 2000
	for now = start.Add(window * 9 / 10); now.Before(start.Add(3 * window)); now = now.Add(step) {
		d, err := l.Allow(context.Background(), "client")
		if err != nil {
			return nil, err
		}
		if d.Allowed {
			bins[int(now.Sub(start)*10/window)]++
		}
	}
	return bins, nil
}

// writePlot draws the admitted requests per tenth of a window, fixed vs
// sliding, as an SVG bar chart.
func writePlot(path string, limit int, window time.Duration) error {
	fixed, err := burst(ratelimit.FixedWindow, limit, window)
	if err != nil {
		return err
	}
	sliding, err := burst(ratelimit.SlidingWindow, limit, window)
	if err != nil {
		return err
	}
	const w, h, left, right, top, bottom = 900, 420, 60, 20, 50, 50
	ymax := limit
	for i := range fixed {
		ymax = max(ymax, fixed[i], sliding[i])
	}
	ymax = ymax * 5 / 4 // room for the legend above the bars
	plotW, plotH := float64(w-left-right), float64(h-top-bottom)
	x := func(bin float64) float64 { return left + bin*plotW/plotBins }
	y := func(v float64) float64 { return top + plotH - v*plotH/float64(ymax) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">Admitted per %v: a client bursting from 0.9 windows on (limit %d per %v)</text>`+"\n", left, window/10, limit, window)
	// Axes, window boundaries, the limit.
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, y(0), x(plotBins), y(0))
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="black"/>`+"\n", left, top, left, y(0))
	for i := 0; i <= plotBins; i += 5 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%v</text>`+"\n", x(float64(i)), y(0)+18, window*time.Duration(i)/10)
	}
	for k := 1; k < 3; k++ {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="4 4"/>`+"\n", x(float64(10*k)), top, x(float64(10*k)), y(0))
	}
	for _, v := range []int{0, limit / 2, limit} {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n", left-6, y(float64(v))+4, v)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#2a2" stroke-dasharray="6 3"/>`+"\n", left, y(float64(limit)), x(plotBins), y(float64(limit)))
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#2a2" text-anchor="end">limit per window</text>`+"\n", x(plotBins)-4, y(float64(limit))-4)
	// Bars: fixed on the left half of each bin, sliding on the right.
	for i := range fixed {
		for j, s := range []struct {
			v     int
			color string
		}{{fixed[i], "#d33"}, {sliding[i], "#36c"}} {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%d</title></rect>`+"\n",
				x(float64(i))+2+float64(j)*(plotW/plotBins-4)/2, y(float64(s.v)), (plotW/plotBins-4)/2, y(0)-y(float64(s.v)), s.color, s.v)
		}
	}
	for j, l := range []struct{ name, color string }{
		{fmt.Sprintf("fixed window: %d admitted across the boundary in %v", fixed[9]+fixed[10], window/5), "#d33"},
		{fmt.Sprintf("sliding window: at most %d in any %v", limit, window), "#36c"},
	} {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="12" height="12" fill="%s"/><text x="%.1f" y="%d">%s</text>`+"\n",
			x(0.5), top+4+20*j, l.color, x(0.5)+18, top+14+20*j, l.name)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
