package soak

import "syscall"

// childAttr makes the kernel kill a worker if the soak itself dies, so an
// interrupted soak never leaves workers behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
