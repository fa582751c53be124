package service

import (
	"fmt"
	"math"
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// upstreamHeaders are envoyproxy/ratelimit's three headers, of the
// descriptor closest to its limit: the limited one with the least
// remaining, or the last over its limit (a quota pool's denial aside). The
// reset is the seconds to the end of its unit's window, aligned to the
// epoch as upstream computes it whatever the algorithm (a window that is
// no unit: its decision's reset). No limited descriptor, no headers.
func (r *RLS) upstreamHeaders(res Result, sts []*rlsv3.RateLimitResponse_DescriptorStatus) []Header {
	closest, least := -1, uint32(math.MaxUint32)
	for i, st := range sts {
		if st.GetCurrentLimit() != nil && st.GetLimitRemaining() < least {
			closest, least = i, st.GetLimitRemaining()
		}
		rule := res.Statuses[i].Rule
		if rule != nil && !rule.Unlimited && st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT && !r.svc.quota(rule) {
			closest, least = i, 0
		}
	}
	if closest < 0 {
		return nil
	}
	st, d := sts[closest], res.Statuses[closest].Decision
	now := d.At
	if now.IsZero() {
		now = time.Now()
	}
	var reset int64
	if unit := res.Statuses[closest].Rule.Unit.Duration(); unit >= time.Second {
		sec := int64(unit / time.Second)
		reset = sec - now.Unix()%sec
	} else {
		reset = int64(math.Ceil(d.ResetAt.Sub(now).Seconds()))
	}
	return []Header{
		{r.upstream.limit, strconv.FormatUint(uint64(st.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{r.upstream.remaining, strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)},
		{r.upstream.reset, strconv.FormatInt(reset, 10)},
	}
}

// dynamicMetadata is what envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA
// answers: the domain; each descriptor's entries ("key=value"), override
// (as protobuf text) and hits_addend; the request's hits_addend when set;
// and "metadata", the rules' metadata of the descriptors not answered
// OVER_LIMIT, merged in order (a key already there stays, mappings merge
// key by key). The rules' metadata is copied, never changed.
func (r *RLS) dynamicMetadata(in *rlsv3.RateLimitRequest, res Result) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(in.GetDomain())}
	descriptors := make([]*structpb.Value, 0, len(in.GetDescriptors()))
	for _, d := range in.GetDescriptors() {
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for i, e := range d.GetEntries() {
			entries[i] = structpb.NewStringValue(fmt.Sprintf("%s=%s", e.GetKey(), e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if o := d.GetLimit(); o != nil {
			f["limit"] = structpb.NewStringValue(o.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descriptors = append(descriptors, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descriptors})
	if h := in.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, st := range res.Statuses {
		if st.Rule != nil && st.Rule.Metadata != nil && !st.OverLimit {
			merge(merged, st.Rule.Metadata)
		}
	}
	if len(merged.GetFields()) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// merge adds src's fields to dst's: a field dst lacks is copied, two
// mappings under one name merge, and any other field dst has stays.
func merge(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			merge(have.GetStructValue(), v.GetStructValue())
		}
	}
}
