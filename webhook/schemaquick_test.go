package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/postbox/postbox/internal/tooling/testsupport/invoice"
)

// quickSchemas are schemas a quickSchema models, each leaning on a
// keyword's edges: bounds either side, lengths in characters, escapes,
// repeated keys, older drafts' forms.
var quickSchemas = map[string]string{
	"invoice": invoice.Schema,
	"keywords": `{"type": "object", "required": ["n"], "maxProperties": 4,
		"additionalProperties": {"type": "string"},
		"properties": {
			"n": {"type": "integer", "minimum": -1, "exclusiveMaximum": 64},
			"x": {"type": "number", "maximum": 2, "exclusiveMinimum": -2},
			"s": {"type": ["string", "null"], "minLength": 2, "maxLength": 3},
			"e": {"enum": ["a", "é", "a\"b", "\\u0062"]},
			"b": {"type": "boolean"},
			"any": true,
			"arr": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "integer"}}}}`,
	"draft-07 items": `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
		"items": {"type": "object", "required": ["a", "b"], "properties": {"a": {"exclusiveMinimum": 0}}}}`,
	"draft-04 exclusiveMinimum": `{"$schema": "http://json-schema.org/draft-04/schema#",
		"properties": {"n": {"type": "integer", "minimum": 0, "exclusiveMinimum": true}}}`,
	"pattern":    `{"properties": {"s": {"pattern": "^[a-z]+$"}}, "required": ["s", "t"]}`,
	"an integer": `{"type": "integer", "maximum": 9007199254740993}`,
	"anything":   `{}`,
}

// quickSeeds are payloads each schema's quickSchema proves, drawn among
// the random ones so that payloads a step from them are tried too.
var quickSeeds = map[string][]string{
	"keywords": {`{"n": 0, "s": "ab", "e": "é"}`, `{"n": 63, "arr": [1, 2], "b": true, "any": {"z": [null]}}`,
		`{"n": -1, "s": null, "other": "abc", "x": 2}`, `{"n": 5, "e": "a", "s": "ééé"}`},
	"draft-07 items":            {`[{"a": 1, "b": 0}, {"a": 2, "b": "x", "c": 0.5}]`, `[]`},
	"draft-04 exclusiveMinimum": {`{"n": 1}`, `{"m": -1}`},
	"pattern":                   {`{"s": "abc", "t": 1}`},
}

// TestQuickSchema_NeverProvesWhatTheLibraryRefuses holds the fast path to
// the library: across random payloads drawn near every keyword's edges,
// each payload a quickSchema proves, jsonschema.Schema.Validate accepts.
// Each schema also has payloads proven and payloads refused, or the check
// would be empty.
func TestQuickSchema_NeverProvesWhatTheLibraryRefuses(t *testing.T) {
	t.Parallel()
	for name, doc := range quickSchemas {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			full, err := CompileSchema([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			q := newQuickSchema(full)
			if q == nil {
				t.Fatalf("no quickSchema for %s", doc)
			}
			for _, seed := range quickSeeds[name] {
				if !q.proves([]byte(seed)) {
					t.Fatalf("seed %s is not proven", seed)
				}
			}
			r := rand.New(rand.NewPCG(1, uint64(len(doc))))
			keys := schemaKeys(doc)
			proven, refused := 0, 0
			var nearby [][]byte
			for i := range 4000 {
				payload := randomJSON(r, keys, 0)
				switch {
				case i%50 == 0 && name == "invoice":
					payload = invoice.Payload(i) // the shape the bench sends
				case i%50 == 0 && len(quickSeeds[name]) > 0:
					payload = []byte(quickSeeds[name][i/50%len(quickSeeds[name])])
				}
				if !json.Valid(payload) {
					t.Fatalf("the generator wrote invalid JSON: %s", payload)
				}
				v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(payload)))
				if err != nil {
					t.Fatal(err)
				}
				libraryErr := full.Validate(v)
				if libraryErr != nil {
					refused++
				}
				if q.proves(payload) {
					proven++
					if libraryErr != nil {
						t.Fatalf("proven but the library refuses %s: %v", payload, libraryErr)
					}
					if proven <= 300 {
						nearby = append(nearby, perturb(payload, keys)...)
						nearby = append(nearby, resample(r, payload, 8)...)
					}
				}
			}
			// Payloads one step from proven ones: an unknown key first, a
			// known key again, last and escaped, with another value; the
			// same shape with other scalars.
			for _, payload := range nearby {
				v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(payload)))
				if err != nil {
					t.Fatalf("%s: %v", payload, err)
				}
				if !json.Valid(payload) {
					t.Fatalf("a step from a proven payload wrote invalid JSON: %s", payload)
				}
				if q.proves(payload) && full.Validate(v) != nil {
					t.Fatalf("proven but the library refuses %s: %v", payload, full.Validate(v))
				}
			}
			if proven == 0 || (refused == 0 && doc != "{}") {
				t.Fatalf("%d payloads proven, %d refused: the draw misses one side", proven, refused)
			}
		})
	}
}

// TestQuickSchema_ModelsOnlyWhatItReads: a schema with a keyword outside
// the set has no quickSchema, so the library alone decides.
func TestQuickSchema_ModelsOnlyWhatItReads(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"allOf": [{"type": "object"}]}`,
		`{"properties": {"a": {"not": {"type": "string"}}}}`,
		`{"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}`,
		`{"enum": [1, 2]}`,
		`{"const": "a"}`,
		`{"multipleOf": 2}`,
		`{"minimum": 0.5}`,
		`{"minProperties": 1}`,
		`{"uniqueItems": true}`,
		`{"prefixItems": [{"type": "string"}]}`,
		`{"patternProperties": {"^a": {"type": "string"}}}`,
		`{"properties": {"a": false}}`,
		`{"dependentRequired": {"a": ["b"]}}`,
		`{"items": {"contains": {"type": "string"}}}`,
		`{"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "string"}]}`,
		`{"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"e": {"format": "email"}}}`,
	} {
		full, err := CompileSchema([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if q := newQuickSchema(full); q != nil {
			t.Errorf("%s: has a quickSchema; want the library alone", doc)
		}
	}
}

// TestQuickSchema_KnowsEveryKeyword fails when the library's compiled
// schema grows a field newQuickSchema has not ruled on: read, refused, or
// an annotation with no say in a verdict.
func TestQuickSchema_KnowsEveryKeyword(t *testing.T) {
	t.Parallel()
	ruled := map[string]string{}
	for _, f := range strings.Fields(`Bool Types Enum MinLength MaxLength Pattern Minimum Maximum ExclusiveMinimum
		ExclusiveMaximum MaxProperties Required Properties AdditionalProperties MinItems MaxItems Items Items2020 DraftVersion`) {
		ruled[f] = "read"
	}
	for _, f := range strings.Fields(`Ref RecursiveRef DynamicRef Const Not AllOf AnyOf OneOf If Then Else Format
		MinProperties PropertyNames PatternProperties Dependencies DependentRequired DependentSchemas
		UnevaluatedProperties UniqueItems Contains MinContains MaxContains AdditionalItems PrefixItems
		UnevaluatedItems ContentEncoding ContentMediaType ContentSchema MultipleOf Extensions`) {
		ruled[f] = "refused"
	}
	for _, f := range strings.Fields(`Location ID Anchor RecursiveAnchor DynamicAnchor Title Description Default
		Comment ReadOnly WriteOnly Examples Deprecated`) {
		ruled[f] = "annotation"
	}
	st := reflect.TypeFor[jsonschema.Schema]()
	for i := range st.NumField() {
		if f := st.Field(i); f.IsExported() && ruled[f.Name] == "" {
			t.Errorf("jsonschema.Schema.%s: newQuickSchema has not ruled on it (read, refuse, or annotation)", f.Name)
		}
	}
}

// TestQuickSchema_CheckTakesTheFastPath: the check proves a payload by
// its quickSchema without the library — here a library schema that refuses
// everything, so a check that went to it would fail — and a payload the
// quickSchema cannot prove still gets the library's verdict and message.
func TestQuickSchema_CheckTakesTheFastPath(t *testing.T) {
	t.Parallel()
	invoiceSchema, err := CompileSchema([]byte(invoice.Schema))
	if err != nil {
		t.Fatal(err)
	}
	refuseAll, err := CompileSchema([]byte(`{"not": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := &schemaCache{compiled: map[string]compiledSchema{
		"fast": {full: refuseAll, quick: newQuickSchema(invoiceSchema)},
		"d":    {full: invoiceSchema, quick: newQuickSchema(invoiceSchema)},
	}, digestOf: map[string]string{}}
	ctx := context.Background()
	payload := invoice.Payload(7)
	if err := c.check(ctx, nil, "invoice.paid", "fast", payload); err != nil {
		t.Fatalf("check = %v; want the quickSchema to prove it, the library not asked", err)
	}
	bad := []byte(strings.Replace(string(payload), `"amount_due":12000`, `"amount_due":-5`, 1))
	if err := c.check(ctx, nil, "invoice.paid", "d", bad); err == nil || !strings.Contains(err.Error(), "at /amount_due: ") {
		t.Fatalf("check(-5) = %v; want the library's refusal naming /amount_due", err)
	}
}

// schemaKeys is every property name in a schema document, for random
// objects to use.
func schemaKeys(doc string) []string {
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		panic(err)
	}
	keys := []string{"other"}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if p, ok := v["properties"].(map[string]any); ok {
				for k := range p {
					keys = append(keys, k)
				}
			}
			if r, ok := v["required"].([]any); ok {
				for _, k := range r {
					keys = append(keys, k.(string))
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(v)
	return keys
}

// perturb returns payload changed one step: an unknown key put first in
// its first object, and each known key put last in its last object,
// escaped, with the value 0.
func perturb(payload []byte, keys []string) [][]byte {
	open, end := strings.IndexByte(string(payload), '{'), strings.LastIndexByte(string(payload), '}')
	if open < 0 || end < open {
		return nil
	}
	p := string(payload)
	first := `"other": 1,`
	if rest := strings.TrimLeft(p[open+1:], " \t\n\r"); strings.HasPrefix(rest, "}") {
		first = `"other": 1`
	}
	out := [][]byte{[]byte(p[:open+1] + first + p[open+1:])}
	sep := ","
	if strings.HasSuffix(strings.TrimRight(p[:end], " \t\n\r"), "{") {
		sep = ""
	}
	for _, k := range keys {
		if k == "" || k == "other" {
			continue
		}
		escaped := `"\u` + fmt.Sprintf("%04x", k[0]) + k[1:] + `"`
		out = append(out, []byte(p[:end]+sep+escaped+": 0"+p[end:]))
	}
	return out
}

// numberPool and stringPool are the scalars drawn: bounds either side,
// integers written as fractions, lengths in characters and bytes, escapes.
var (
	numberPool = []string{"0", "-0", "1", "-1", "-2", "2", "3", "63", "64", "65", "12000", "-5", "1.0", "2.0", "1.5",
		"-1.5", "1e2", "1E0", "0.0", "-0.0", "2.000001", "1.9999", "9007199254740993", "9007199254740994",
		"123456789012345678", "1234567890123456789", "99999999999999999999"}
	stringPool = []string{`""`, `"a"`, `"ab"`, `"abc"`, `"abcd"`, `"é"`, `"\u00e9"`, `"\\u00e9"`, `"\u0062"`, `"éé"`, `"ééé"`, `"éééé"`,
		`"a\"b"`, `"a\\b"`, `"eur"`, `"EUR"`, `"usd"`, `"gbp"`, `"in_12"`, `"in_x"`, `"in_"`, `"\u0065ur"`, `"in_\u0031"`,
		`"` + strings.Repeat("c", 64) + `"`, `"` + strings.Repeat("c", 65) + `"`, `"sku_1"`, `"ab1"`}
)

// resample returns payload with n of its scalars, each in turn, drawn
// again from the pool of its kind: the same shape, other values.
func resample(r *rand.Rand, payload []byte, n int) [][]byte {
	type span struct {
		start, end int
		pool       []string
	}
	var spans []span
	dec := json.NewDecoder(strings.NewReader(string(payload)))
	dec.UseNumber()
	prev := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		end, start := int(dec.InputOffset()), prev
		for start < end && strings.IndexByte(" \t\n\r:,", payload[start]) >= 0 {
			start++
		}
		switch tok.(type) {
		case string:
			spans = append(spans, span{start, end, stringPool})
		case json.Number:
			spans = append(spans, span{start, end, numberPool})
		}
		prev = end
	}
	var out [][]byte
	for range min(n, len(spans)) {
		sp := spans[r.IntN(len(spans))]
		v := sp.pool[r.IntN(len(sp.pool))]
		out = append(out, []byte(string(payload[:sp.start])+v+string(payload[sp.end:])))
	}
	return out
}

// randomJSON draws a JSON value near the edges the schemas test: bounds
// either side, lengths by character, escapes, fractions that are integers,
// repeated keys, stray whitespace.
func randomJSON(r *rand.Rand, keys []string, depth int) []byte {
	ws := func() string { return []string{"", "", "", " ", "\n\t"}[r.IntN(5)] }
	kind := r.IntN(10)
	if depth > 3 && kind >= 7 {
		kind = r.IntN(7)
	}
	switch kind {
	case 0:
		return []byte([]string{"null", "true", "false"}[r.IntN(3)])
	case 1, 2:
		return []byte(numberPool[r.IntN(len(numberPool))])
	case 3, 4:
		return []byte(stringPool[r.IntN(len(stringPool))])
	case 5, 6:
		var b strings.Builder
		b.WriteString("[" + ws())
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString("," + ws())
			}
			b.Write(randomJSON(r, keys, depth+1))
		}
		b.WriteString(ws() + "]")
		return []byte(b.String())
	default:
		var b strings.Builder
		b.WriteString("{" + ws())
		n := r.IntN(len(keys) + 2)
		perm := r.Perm(len(keys))
		for i := range n {
			if i > 0 {
				b.WriteString("," + ws())
			}
			k := keys[perm[i%len(keys)]]
			if r.IntN(20) == 0 {
				k = keys[r.IntN(len(keys))] // a key again
			}
			key, _ := json.Marshal(k)
			if r.IntN(30) == 0 && len(k) > 0 {
				key = []byte(`"\u` + fmt.Sprintf("%04x", k[0]) + k[1:] + `"`)
			}
			b.Write(key)
			b.WriteString(ws() + ":" + ws())
			b.Write(randomJSON(r, keys, depth+1))
		}
		b.WriteString(ws() + "}")
		return []byte(b.String())
	}
}

// BenchmarkSchemaCheck is one 1 KB invoice checked by its quickSchema and
// by the library. Run with: go test -run '^$' -bench SchemaCheck ./webhook/
func BenchmarkSchemaCheck(b *testing.B) {
	full, err := CompileSchema([]byte(invoice.Schema))
	if err != nil {
		b.Fatal(err)
	}
	q, payload := newQuickSchema(full), invoice.Payload(7)
	b.Run("quickSchema", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !q.proves(payload) {
				b.Fatal("not proven")
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := validatePayload(full, "invoice.paid", payload); err != nil {
				b.Fatal(err)
			}
		}
	})
}
