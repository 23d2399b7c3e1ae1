package mailevents

import (
	"encoding/json"
	"errors"
	"io"
)

// errTrailingData is a body with more after its JSON object: a second
// object, or bytes. The signature covers the whole body, so recording only
// the first object would act on something the sender never sent alone.
var errTrailingData = errors.New("trailing data after the JSON object")

// endOfBody is nil when dec has consumed its whole input but whitespace.
func endOfBody(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return errTrailingData
	}
	return nil
}
