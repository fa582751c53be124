package config

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
)

// metadata reads a descriptor's metadata: a mapping of anything, which a
// response carries as it is (Envoy's dynamic metadata, see
// Rule.Metadata). Keys of any kind are read as text, as envoyproxy/ratelimit
// reads them; nothing (or an empty mapping) is no metadata.
func (b *builder) metadata(d *yamlDescriptor) (*structpb.Struct, error) {
	if d.Metadata == nil {
		return nil, nil
	}
	m, ok := textKeys(d.Metadata).(map[string]any)
	if !ok {
		return nil, invalid(b.file, d.Line, fmt.Sprintf("metadata is a %T, not a mapping", d.Metadata))
	}
	if len(m) == 0 {
		return nil, nil
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		return nil, invalid(b.file, d.Line, fmt.Sprintf("metadata: %v", err))
	}
	return st, nil
}

// textKeys is v with every mapping's keys made text, at any depth.
func textKeys(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = textKeys(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[fmt.Sprint(k)] = textKeys(e)
		}
		return out
	case time.Time: // a timestamp stays the text it was written as, as upstream reads it
		if v.Equal(v.Truncate(24 * time.Hour)) {
			return v.Format(time.DateOnly)
		}
		return v.Format(time.RFC3339Nano)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = textKeys(e)
		}
		return out
	}
	return v
}
