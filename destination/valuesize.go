package destination

import (
	"reflect"
	"time"
)

// valueSize estimates how many bytes printing v would take (fmt's %v, or
// JSON indented by two spaces per level, whichever is larger, within a
// small constant factor), walking v with reflection. It stops as soon as
// the estimate passes limit and then reports false: the cost of a call is
// bounded by limit, not by v. A value reached twice (the same list in two
// places) counts twice, as printing it would.
//
// Filters and body templates call it before they build a string from a
// value, so that nothing past their bounds is ever allocated.
func valueSize(v any, limit int) (int, bool) {
	s := sizer{limit: limit}
	s.add(reflect.ValueOf(v), 0)
	return s.n, s.n <= limit
}

type sizer struct {
	n, limit int
	// leaves counts the values that are not lists, maps or structs: what a
	// printf width pads, each.
	leaves int
}

// valueLeaves counts the values in v that are not lists, maps or structs
// (a []byte is one), stopping past limit.
func valueLeaves(v any, limit int) int {
	s := sizer{limit: 1 << 62}
	s.countLeaves(reflect.ValueOf(v), limit)
	return s.leaves
}

func (s *sizer) countLeaves(v reflect.Value, limit int) {
	if s.leaves > limit {
		return
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if !v.IsNil() {
			s.countLeaves(v.Elem(), limit)
			return
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() != reflect.Uint8 {
			for i := 0; i < v.Len() && s.leaves <= limit; i++ {
				s.countLeaves(v.Index(i), limit)
			}
			return
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() && s.leaves <= limit {
			s.countLeaves(it.Key(), limit)
			s.countLeaves(it.Value(), limit)
		}
		return
	case reflect.Struct:
		if v.Type() != timeType {
			for i := 0; i < v.NumField() && s.leaves <= limit; i++ {
				s.countLeaves(v.Field(i), limit)
			}
			return
		}
	}
	s.leaves++
}

// Sizes of what has no length of its own.
const (
	sizeScalar = 24 // a number, a bool, <nil>
	sizeTime   = 40 // a time.Time as fmt prints it
	sizeIndent = 2  // JSON indentation per level
)

var timeType = reflect.TypeOf(time.Time{})

func (s *sizer) add(v reflect.Value, depth int) {
	if s.n > s.limit {
		return
	}
	// Each value is on a line of its own in indented JSON.
	s.n += depth*sizeIndent + 1
	if !v.IsValid() {
		s.n += sizeScalar
		return
	}
	switch v.Kind() {
	case reflect.String:
		// Escaping can make a string longer (\u0000): within a factor of
		// six, which the callers' bounds allow for.
		s.n += v.Len() + 2
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			s.n += sizeScalar
			return
		}
		s.add(v.Elem(), depth)
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			s.n += v.Len() * 4 // []byte prints as numbers, or base64
			return
		}
		s.n += 2
		for i := 0; i < v.Len() && s.n <= s.limit; i++ {
			s.add(v.Index(i), depth+1)
		}
	case reflect.Map:
		s.n += 5
		it := v.MapRange()
		for it.Next() && s.n <= s.limit {
			s.add(it.Key(), depth+1)
			s.add(it.Value(), depth+1)
		}
	case reflect.Struct:
		if v.Type() == timeType {
			s.n += sizeTime
			return
		}
		s.n += 2
		for i := 0; i < v.NumField() && s.n <= s.limit; i++ {
			s.n += len(v.Type().Field(i).Name) + 1
			s.add(v.Field(i), depth+1)
		}
	default:
		s.n += sizeScalar
	}
}
