//go:build !linux

package soak

import "syscall"

// childAttr: only Linux can tie a child's life to its parent's; elsewhere
// the soak's deferred stop is the only guard.
func childAttr() *syscall.SysProcAttr { return nil }
