//go:build !linux

package smtp

import "testing"

// fullBacklog relies on Linux dropping the SYNs a full accept queue cannot
// take; elsewhere the case is skipped.
func fullBacklog(t *testing.T) (string, int) {
	t.Skip("a full accept queue that drops SYNs is Linux behaviour")
	return "", 0
}
