package rlswire

import (
	"math"
	"unicode/utf8"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// decodeRequest fills m, a fresh message, from b, a RateLimitRequest on the
// wire, and reports whether it did. It takes only the plain shape, in which
// every field is one it knows (domain, descriptors and their entries,
// overrides and hits_addend), with the wire type the schema gives it, every
// string valid UTF-8, every number in its field's range, and no message
// field of a descriptor given twice (which proto would merge). Anything else
// reports false with m untouched, for proto.Unmarshal to decode, so that
// the message is always the one proto.Unmarshal makes (wire_test.go checks
// it on any bytes).
//
// A first pass checks the shape and counts, so that the second allocates
// the descriptors, the entries and their pointers in one slab each, and
// the strings as substrings of one copy of a small message (smallMessage).
func decodeRequest(b []byte, m *rlsv3.RateLimitRequest) bool {
	var n counts
	if !scanRequest(b, &n) {
		return false
	}
	f := filler{
		descs:   make([]rlv3.RateLimitDescriptor, n.descriptors),
		ptrs:    make([]*rlv3.RateLimitDescriptor, n.descriptors),
		entries: make([]rlv3.RateLimitDescriptor_Entry, n.entries),
		eptrs:   make([]*rlv3.RateLimitDescriptor_Entry, n.entries),
	}
	if len(b) <= smallMessage {
		f.text = string(b)
	}
	f.request(b, m)
	return true
}

// smallMessage is the largest message whose strings share one copy of it:
// a string a caller keeps (a domain in a metric's label) then keeps at most
// this many bytes alive. A larger message's strings are copied one by one,
// as proto copies them.
const smallMessage = 1024

// counts are what a request holds, for the slabs.
type counts struct{ descriptors, entries int }

// scanRequest checks that b is a request of the plain shape and counts its
// descriptors and entries.
func scanRequest(b []byte, n *counts) bool {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		switch {
		case num == 1 && typ == protowire.BytesType: // domain
			v, l := protowire.ConsumeBytes(b)
			if l < 0 || !utf8.Valid(v) {
				return false
			}
			b = b[l:]
		case num == 2 && typ == protowire.BytesType: // a descriptor
			v, l := protowire.ConsumeBytes(b)
			if l < 0 || !scanDescriptor(v, n) {
				return false
			}
			n.descriptors++
			b = b[l:]
		case num == 3 && typ == protowire.VarintType: // hits_addend
			v, l := protowire.ConsumeVarint(b)
			if l < 0 || v > math.MaxUint32 {
				return false
			}
			b = b[l:]
		default:
			return false
		}
	}
	return true
}

func scanDescriptor(b []byte, n *counts) bool {
	var limit, hits bool
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 || typ != protowire.BytesType {
			return false
		}
		v, vl := protowire.ConsumeBytes(b[l:])
		if vl < 0 {
			return false
		}
		b = b[l+vl:]
		switch {
		case num == 1 && scanEntry(v): // an entry
			n.entries++
		case num == 2 && !limit && scanOverride(v): // limit
			limit = true
		case num == 3 && !hits && scanUInt64Value(v): // hits_addend
			hits = true
		default:
			return false
		}
	}
	return true
}

// scanEntry checks an entry: a key and a value, strings.
func scanEntry(b []byte) bool {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 || typ != protowire.BytesType || num != 1 && num != 2 {
			return false
		}
		v, vl := protowire.ConsumeBytes(b[l:])
		if vl < 0 || !utf8.Valid(v) {
			return false
		}
		b = b[l+vl:]
	}
	return true
}

// scanOverride checks a RateLimitOverride: requests_per_unit (uint32) and
// unit (an enum: an int32).
func scanOverride(b []byte) bool {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 || typ != protowire.VarintType {
			return false
		}
		v, vl := protowire.ConsumeVarint(b[l:])
		if vl < 0 || num == 1 && v > math.MaxUint32 || num == 2 && int64(v) != int64(int32(v)) || num != 1 && num != 2 {
			return false
		}
		b = b[l+vl:]
	}
	return true
}

// scanUInt64Value checks a google.protobuf.UInt64Value.
func scanUInt64Value(b []byte) bool {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 || num != 1 || typ != protowire.VarintType {
			return false
		}
		_, vl := protowire.ConsumeVarint(b[l:])
		if vl < 0 {
			return false
		}
		b = b[l+vl:]
	}
	return true
}

// filler writes a checked request into the slabs.
type filler struct {
	descs   []rlv3.RateLimitDescriptor
	ptrs    []*rlv3.RateLimitDescriptor
	entries []rlv3.RateLimitDescriptor_Entry
	eptrs   []*rlv3.RateLimitDescriptor_Entry
	next    int    // the next entry's index in entries and eptrs
	text    string // the whole message as a string, when it is small
	base    []byte // the whole message, which text copies
}

// str is v, a string within the message, as a string.
func (f *filler) str(v []byte) string {
	if f.text == "" {
		return string(v)
	}
	// v was sliced from f.base, each slice ending where the message does:
	// its offset is what its capacity lost.
	off := cap(f.base) - cap(v)
	return f.text[off : off+len(v)]
}

// The second pass: every tag and length was checked by the first.

func (f *filler) request(b []byte, m *rlsv3.RateLimitRequest) {
	f.base = b
	d := 0
	for len(b) > 0 {
		num, _, l := protowire.ConsumeTag(b)
		b = b[l:]
		switch num {
		case 1:
			v, l := protowire.ConsumeBytes(b)
			m.Domain, b = f.str(v), b[l:]
		case 2:
			v, l := protowire.ConsumeBytes(b)
			f.ptrs[d] = &f.descs[d]
			f.descriptor(v, f.ptrs[d])
			d, b = d+1, b[l:]
		case 3:
			v, l := protowire.ConsumeVarint(b)
			m.HitsAddend, b = uint32(v), b[l:]
		}
	}
	if d > 0 {
		m.Descriptors = f.ptrs
	}
}

func (f *filler) descriptor(b []byte, m *rlv3.RateLimitDescriptor) {
	first := f.next
	for len(b) > 0 {
		num, _, l := protowire.ConsumeTag(b)
		v, vl := protowire.ConsumeBytes(b[l:])
		b = b[l+vl:]
		switch num {
		case 1:
			e := &f.entries[f.next]
			f.eptrs[f.next], f.next = e, f.next+1
			f.entry(v, e)
		case 2:
			m.Limit = override(v)
		case 3:
			m.HitsAddend = uint64Value(v)
		}
	}
	if f.next > first { // capped: an append to one descriptor's entries cannot write the next's
		m.Entries = f.eptrs[first:f.next:f.next]
	}
}

func (f *filler) entry(b []byte, e *rlv3.RateLimitDescriptor_Entry) {
	for len(b) > 0 {
		num, _, l := protowire.ConsumeTag(b)
		v, vl := protowire.ConsumeBytes(b[l:])
		b = b[l+vl:]
		if num == 1 {
			e.Key = f.str(v)
		} else {
			e.Value = f.str(v)
		}
	}
}

func override(b []byte) *rlv3.RateLimitDescriptor_RateLimitOverride {
	o := &rlv3.RateLimitDescriptor_RateLimitOverride{}
	for len(b) > 0 {
		num, _, l := protowire.ConsumeTag(b)
		v, vl := protowire.ConsumeVarint(b[l:])
		b = b[l+vl:]
		if num == 1 {
			o.RequestsPerUnit = uint32(v)
		} else {
			o.Unit = typev3.RateLimitUnit(int32(v))
		}
	}
	return o
}

func uint64Value(b []byte) *wrapperspb.UInt64Value {
	w := &wrapperspb.UInt64Value{}
	for len(b) > 0 {
		_, _, l := protowire.ConsumeTag(b)
		v, vl := protowire.ConsumeVarint(b[l:])
		w.Value, b = v, b[l+vl:]
	}
	return w
}
