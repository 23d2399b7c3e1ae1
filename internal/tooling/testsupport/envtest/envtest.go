// Package envtest builds the lookup functions the settings loaders take
// (the shape of os.LookupEnv) from literal pairs, for tests.
package envtest

// Lookup returns a lookup that knows exactly the given NAME, value pairs.
func Lookup(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}
