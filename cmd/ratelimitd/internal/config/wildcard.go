package config

import "strings"

// wildcard is a configured descriptor whose key_value holds a '*', as
// envoyproxy/ratelimit matches it: the whole "key_value" of a request's
// entry (the key alone for a value-less descriptor) against the pattern,
// each '*' any run of bytes, the empty one included.
type wildcard struct {
	entry Entry
	// parts are the pattern split at its '*'s: at least two.
	parts []string
	// fixed is the bytes the parts hold: no shorter text matches.
	fixed int
}

func newWildcard(e Entry) wildcard {
	pattern := e.Key
	if e.Value != "" {
		pattern += "_" + e.Value
	}
	w := wildcard{entry: e, parts: strings.Split(pattern, "*")}
	for _, p := range w.parts {
		w.fixed += len(p)
	}
	return w
}

// matches reports whether text, an entry's key_value, matches the pattern: it starts with
// the first part, ends with the last, and holds the others in order between
// them, each taken at its first place (which leaves the most room to the
// rest, so no later choice would match where this one does not).
func (w wildcard) matches(text string) bool {
	if len(text) < w.fixed {
		return false
	}
	first, last := w.parts[0], w.parts[len(w.parts)-1]
	if !strings.HasPrefix(text, first) || !strings.HasSuffix(text, last) {
		return false
	}
	rest := text[len(first) : len(text)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
