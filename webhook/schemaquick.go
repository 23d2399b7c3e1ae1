package webhook

import (
	"math/big"
	"unicode/utf8"
	"unsafe"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A quickSchema proves, straight off a payload's bytes, that the payload
// matches a compiled schema, for the keywords an application's event
// schemas are made of: type, properties, required, additionalProperties,
// items, string enums, lengths, pattern, integer bounds, item counts.
//
// It exists for its cost. jsonschema.Schema.Validate of a 1 KB invoice
// takes ~30 µs and ~350 allocations (a decoded tree, a big.Rat for every
// number it compares), and at thousands of enqueues a second that garbage
// slows the application's whole process; a quickSchema walks the bytes
// once and allocates nothing.
//
// It only ever says "proven": a payload it cannot prove — one that fails,
// or uses what it does not model (an escaped string it would have to
// read, a fraction where a bound is compared, a keyword outside the set)
// — is left to the library, which gives the verdict and the message. A
// schema with any keyword outside the set has no quickSchema at all
// (newQuickSchema returns nil), so the library's semantics are the only
// ones; TestQuickSchema_NeverProvesWhatTheLibraryRefuses holds the two
// to the same verdicts, and TestQuickSchema_KnowsEveryKeyword fails when
// the library grows a keyword this file has not ruled on.
type quickSchema struct {
	anything bool        // the schema true: any value
	types    quickTypes  // allowed types, 0 for any
	enum     []string    // allowed strings (an enum of strings only)
	minLen   int         // -1 for none, in characters as the library counts
	maxLen   int         // -1 for none
	pattern  interface { // matched against the unescaped string
		MatchString(string) bool
	}
	bounds []quickBound // integer bounds; a fraction is not proven

	properties    map[string]*quickSchema
	required      map[string]uint // name → bit
	requiredAll   uint            // every required bit
	additional    *quickSchema    // nil: additional properties allowed
	noAdditional  bool            // additionalProperties: false
	maxProperties int             // -1 for none

	items    *quickSchema // nil: any items
	minItems int          // -1 for none
	maxItems int          // -1 for none
}

type quickTypes uint8

const (
	quickNull quickTypes = 1 << iota
	quickBoolean
	quickNumber
	quickInteger
	quickString
	quickArray
	quickObject
)

var quickTypeNames = map[string]quickTypes{
	"null": quickNull, "boolean": quickBoolean, "number": quickNumber, "integer": quickInteger,
	"string": quickString, "array": quickArray, "object": quickObject,
}

// quickBound is one of minimum, maximum, exclusiveMinimum,
// exclusiveMaximum: the integer literal n must satisfy n op v.
type quickBound struct {
	v         int64
	below     bool // n must be below v (a maximum), else above it
	inclusive bool
}

// maxQuickRequired is how many required names one object's bitmask holds.
const maxQuickRequired = 64

// newQuickSchema is s as a quickSchema, or nil when s uses anything a
// quickSchema does not model. Each field of jsonschema.Schema is either
// read here, refused here, or an annotation.
func newQuickSchema(s *jsonschema.Schema) *quickSchema {
	if s == nil {
		return nil
	}
	if s.Bool != nil {
		if *s.Bool {
			return &quickSchema{anything: true}
		}
		return nil
	}
	if s.Ref != nil || s.RecursiveRef != nil || s.DynamicRef != nil || s.Const != nil || s.Not != nil ||
		s.AllOf != nil || s.AnyOf != nil || s.OneOf != nil || s.If != nil || s.Then != nil || s.Else != nil ||
		s.Format != nil || s.MinProperties != nil || s.PropertyNames != nil || len(s.PatternProperties) > 0 ||
		len(s.Dependencies) > 0 || len(s.DependentRequired) > 0 || len(s.DependentSchemas) > 0 ||
		s.UnevaluatedProperties != nil || s.UniqueItems || s.Contains != nil || s.MinContains != nil ||
		s.MaxContains != nil || s.AdditionalItems != nil || len(s.PrefixItems) > 0 || s.UnevaluatedItems != nil ||
		s.ContentEncoding != nil || s.ContentMediaType != nil || s.ContentSchema != nil || s.MultipleOf != nil ||
		len(s.Extensions) > 0 {
		return nil
	}
	q := &quickSchema{minLen: -1, maxLen: -1, maxProperties: -1, minItems: -1, maxItems: -1}
	if s.Types != nil {
		for _, name := range s.Types.ToStrings() {
			t, ok := quickTypeNames[name]
			if !ok {
				return nil
			}
			q.types |= t
		}
	}
	if s.Enum != nil {
		for _, v := range s.Enum.Values {
			str, ok := v.(string)
			if !ok {
				return nil
			}
			q.enum = append(q.enum, str)
		}
		if q.enum == nil {
			return nil // an empty enum allows nothing: the library says so
		}
	}
	q.minLen, q.maxLen = intOr(s.MinLength), intOr(s.MaxLength)
	if s.Pattern != nil {
		q.pattern = s.Pattern
	}
	for _, b := range []struct {
		r                *big.Rat
		below, inclusive bool
	}{{s.Minimum, false, true}, {s.Maximum, true, true}, {s.ExclusiveMinimum, false, false}, {s.ExclusiveMaximum, true, false}} {
		if b.r == nil {
			continue
		}
		if !b.r.IsInt() || !b.r.Num().IsInt64() {
			return nil
		}
		q.bounds = append(q.bounds, quickBound{v: b.r.Num().Int64(), below: b.below, inclusive: b.inclusive})
	}

	q.maxProperties = intOr(s.MaxProperties)
	if len(s.Required) > maxQuickRequired {
		return nil
	}
	for i, name := range s.Required {
		if q.required == nil {
			q.required = map[string]uint{}
		}
		if _, dup := q.required[name]; !dup {
			q.required[name] = uint(i)
			q.requiredAll |= 1 << uint(i)
		}
	}
	if len(s.Properties) > 0 {
		q.properties = make(map[string]*quickSchema, len(s.Properties))
		for name, ps := range s.Properties {
			pq := newQuickSchema(ps)
			if pq == nil {
				return nil
			}
			q.properties[name] = pq
		}
	}
	switch a := s.AdditionalProperties.(type) {
	case nil:
	case bool:
		q.noAdditional = !a
	case *jsonschema.Schema:
		if q.additional = newQuickSchema(a); q.additional == nil {
			return nil
		}
	default:
		return nil
	}

	q.minItems, q.maxItems = intOr(s.MinItems), intOr(s.MaxItems)
	items := s.Items2020
	if s.DraftVersion < 2020 {
		switch it := s.Items.(type) {
		case nil:
		case *jsonschema.Schema:
			items = it
		default:
			return nil // a tuple of schemas
		}
	} else if s.Items != nil {
		return nil
	}
	if items != nil {
		if q.items = newQuickSchema(items); q.items == nil {
			return nil
		}
	}
	return q
}

func intOr(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

// proves is true when payload, valid JSON, is proven to match q; false
// says nothing: the library decides.
func (q *quickSchema) proves(payload []byte) bool {
	end, ok := q.value(payload, skipSpace(payload, 0))
	return ok && skipSpace(payload, end) == len(payload)
}

// value checks the value starting at b[i] and returns where it ends; a
// nil q allows any value.
func (q *quickSchema) value(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	if q == nil || q.anything {
		return skipValue(b, i)
	}
	if q.enum != nil && b[i] != '"' {
		return i, false // an enum of strings only
	}
	switch c := b[i]; {
	case c == '{':
		if !q.allows(quickObject) {
			return i, false
		}
		return q.object(b, i)
	case c == '[':
		if !q.allows(quickArray) {
			return i, false
		}
		return q.array(b, i)
	case c == '"':
		end, escaped, ok := scanString(b, i)
		if !ok || !q.allows(quickString) {
			return end, false
		}
		if q.enum == nil && q.minLen < 0 && q.maxLen < 0 && q.pattern == nil {
			return end, true
		}
		if escaped {
			return end, false // its value would have to be unescaped
		}
		return end, q.str(b[i+1 : end-1])
	case c == 't' || c == 'f':
		end := i + 4
		if c == 'f' {
			end++
		}
		return min(end, len(b)), end <= len(b) && q.allows(quickBoolean)
	case c == 'n':
		return min(i+4, len(b)), i+4 <= len(b) && q.allows(quickNull)
	default:
		return q.number(b, i)
	}
}

func (q *quickSchema) allows(t quickTypes) bool {
	return q.types == 0 || q.types&t != 0
}

// str checks an unescaped string's characters.
func (q *quickSchema) str(raw []byte) bool {
	// The string lives only as long as this call: nothing keeps it.
	s := unsafe.String(unsafe.SliceData(raw), len(raw))
	if q.enum != nil {
		found := false
		for _, e := range q.enum {
			if e == s {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if q.minLen >= 0 || q.maxLen >= 0 {
		n := utf8.RuneCount(raw)
		if (q.minLen >= 0 && n < q.minLen) || (q.maxLen >= 0 && n > q.maxLen) {
			return false
		}
	}
	return q.pattern == nil || q.pattern.MatchString(s)
}

// number checks a number literal. Only a plain integer of up to 18
// digits is proven to be an integer or compared with a bound.
func (q *quickSchema) number(b []byte, i int) (int, bool) {
	end := i
	integer := true
	for end < len(b) {
		c := b[end]
		if c == '.' || c == 'e' || c == 'E' || c == '+' {
			integer = false
		} else if (c < '0' || c > '9') && c != '-' {
			break
		}
		end++
	}
	if end == i {
		return end, false
	}
	digits := b[i:end]
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		integer = false
	}
	if q.types != 0 && q.types&quickNumber == 0 && (q.types&quickInteger == 0 || !integer) {
		return end, false
	}
	if len(q.bounds) == 0 {
		return end, true
	}
	if !integer {
		return end, false
	}
	var n int64
	for _, c := range digits {
		n = n*10 + int64(c-'0')
	}
	if b[i] == '-' {
		n = -n
	}
	for _, bd := range q.bounds {
		switch {
		case bd.below && bd.inclusive && n > bd.v,
			bd.below && !bd.inclusive && n >= bd.v,
			!bd.below && bd.inclusive && n < bd.v,
			!bd.below && !bd.inclusive && n <= bd.v:
			return end, false
		}
	}
	return end, true
}

func (q *quickSchema) object(b []byte, i int) (int, bool) {
	var seen uint
	end, count, ok := elements(b, i, '}', func(i int) (int, bool) {
		keyEnd, escaped, ok := scanString(b, i)
		if !ok || escaped {
			return keyEnd, false
		}
		key := b[i+1 : keyEnd-1]
		i = skipSpace(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return i, false
		}
		sub := q.properties[string(key)]
		if sub == nil {
			switch {
			case q.noAdditional:
				return i, false
			case q.additional != nil:
				sub = q.additional
			}
		}
		if bit, ok := q.required[string(key)]; ok {
			seen |= 1 << bit
		}
		return sub.value(b, skipSpace(b, i+1))
	})
	// count counts a repeated key twice: only ever too many, which is not
	// proven and goes to the library.
	return end, ok && seen == q.requiredAll && (q.maxProperties < 0 || count <= q.maxProperties)
}

func (q *quickSchema) array(b []byte, i int) (int, bool) {
	end, count, ok := elements(b, i, ']', func(i int) (int, bool) {
		return q.items.value(b, i)
	})
	return end, ok && (q.minItems < 0 || count >= q.minItems) && (q.maxItems < 0 || count <= q.maxItems)
}

// elements runs each on every element of the object or array opening at
// b[i] and closing with end, and returns where it ends and how many
// elements it has.
func elements(b []byte, i int, end byte, each func(i int) (int, bool)) (int, int, bool) {
	count := 0
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == end {
		return i + 1, 0, true
	}
	for i < len(b) {
		next, ok := each(i)
		if !ok {
			return next, count, false
		}
		count++
		i = skipSpace(b, next)
		switch {
		case i >= len(b):
			return i, count, false
		case b[i] == end:
			return i + 1, count, true
		case b[i] != ',':
			return i, count, false
		}
		i = skipSpace(b, i+1)
	}
	return i, count, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the end of the string starting at b[i] (past its
// closing quote) and whether it holds an escape.
func scanString(b []byte, i int) (end int, escaped, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false, false
	}
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped, true
		}
	}
	return len(b), escaped, false
}

// skipValue returns the end of the value starting at b[i], unchecked.
func skipValue(b []byte, i int) (int, bool) {
	start, depth := i, 0
	for i < len(b) {
		switch b[i] {
		case '"':
			end, _, ok := scanString(b, i)
			if !ok {
				return end, false
			}
			i = end
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
		default:
			for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != '"' && b[i] != '{' && b[i] != '[' {
				i++
			}
		}
		if depth == 0 {
			return i, i > start
		}
		if depth < 0 {
			return i, false
		}
		if depth > 0 && i < len(b) && (b[i] == ',' || b[i] == ' ' || b[i] == ':' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
			i++
		}
	}
	return i, false
}
