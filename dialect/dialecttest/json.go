package dialecttest

import (
	"encoding/json"
	"reflect"
)

// jsonEqual compares JSON documents by value (a database may normalise
// whitespace and key order).
func jsonEqual(got []byte, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}
