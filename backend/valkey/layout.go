package valkey

import "github.com/ratelimit-go/ratelimit/internal/script"

// Layout is the newest version of the key layout the store reads and can
// write; it reads layout 1, the previous release's, too (see WithLayout).
const Layout = script.Layout

// WithLayout makes the store write the state of its keys in layout n: 1
// (the default) or 2 (Layout). Either way it reads both, and state written
// in one layout moves to the other when an instance writing that one
// updates it, so instances writing different layouts decide every key
// together, exactly.
//
// Layout 1 is the previous release's: instances of that release read it, so
// a rolling upgrade from it is exact. Layout 2 costs the server less per
// decision (the fixed window, the counter and GCRA: packed state under
// shorter names; docs/figures.md), but the previous release does not read
// it: write it once no instance of a release before this one runs (a new
// deployment may from the start). docs/scaling.md has the procedure. New
// panics on another n, a mistake of the program.
func WithLayout(n int) Option {
	return func(s *Store) { s.layout = n }
}
