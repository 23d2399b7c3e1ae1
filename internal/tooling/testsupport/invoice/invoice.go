// Package invoice is an event schema as applications write them and
// payloads that match it: the catalog bench checks 1 KB payloads against
// it, and the schema check's tests hold its fast path to the library on
// the same shape.
package invoice

import (
	"fmt"
	"strings"
)

// Schema is a ten-keyword schema of an invoice: a pattern, an enum,
// bounds, lengths, an array of objects, no other properties.
const Schema = `{"type": "object", "required": ["invoice_id", "customer", "amount_due", "currency", "lines", "memo"],
"additionalProperties": false,
"properties": {
	"invoice_id": {"type": "string", "pattern": "^in_[0-9]+$"},
	"customer": {"type": "string", "minLength": 1, "maxLength": 64},
	"amount_due": {"type": "integer", "minimum": 0},
	"currency": {"enum": ["eur", "usd", "gbp"]},
	"lines": {"type": "array", "maxItems": 100, "items": {"type": "object", "required": ["sku", "quantity", "unit_amount"],
		"properties": {"sku": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}, "unit_amount": {"type": "integer"}}}},
	"memo": {"type": "string", "maxLength": 2000}
}}`

// Payload is the i-th invoice, about 1 KB, matching Schema.
func Payload(i int) []byte {
	var lines []string
	for l := range 6 {
		lines = append(lines, fmt.Sprintf(`{"sku":"sku_%d_%d","quantity":%d,"unit_amount":%d}`, i, l, l+1, 1000+l))
	}
	return fmt.Appendf(nil, `{"invoice_id":"in_%d","customer":"cus_%d","amount_due":12000,"currency":"eur","lines":[%s],"memo":"%s"}`,
		i, i%977, strings.Join(lines, ","), strings.Repeat("m", 560))
}
