package smtp

import (
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// fullBacklog is a loopback listener that never accepts, with an accept
// queue of one already taken: Linux drops the SYN of every further
// connect, so a dial to it hangs until its own deadline. It returns once a
// probe dial has been seen to hang.
func fullBacklog(t *testing.T) (host string, port int) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port = sa.(*syscall.SockaddrInet4).Port
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Fill the queue: connect until a connect does not complete.
	for i := 0; ; i++ {
		if i == 16 {
			t.Fatal("the listener's accept queue never filled")
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break // full: this SYN was dropped
		}
		t.Cleanup(func() { c.Close() })
	}
	return "127.0.0.1", port
}
