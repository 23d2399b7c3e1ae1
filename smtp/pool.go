package smtp

import (
	"crypto/tls"
	"net"
	"sync"
	"time"

	gomail "github.com/wneessen/go-mail/smtp"
)

// conn is one session with the relay. It belongs to exactly one Send at a
// time; between sends it sits in the pool, past its greeting, STARTTLS and
// AUTH, with its last transaction completed.
type conn struct {
	raw    net.Conn       // the TCP connection under any TLS: deadlines and cancellation act here
	tls    *tls.Conn      // implicit TLS only: established at dial
	client *gomail.Client // nil until the greeting was read
	idle   time.Time      // when it was last put back
}

func (c *conn) close() {
	if c.client != nil {
		_ = c.client.Close()
	}
	_ = c.raw.Close()
}

// pool keeps idle connections for reuse, like http.Transport does: a
// handshake and AUTH per message would cost more round trips than the
// message itself. Last in, first out, so the connection most likely to be
// alive is reused and the others age out.
type pool struct {
	max     int
	timeout time.Duration

	mu     sync.Mutex
	idle   []*conn // oldest first
	timer  *time.Timer
	closed bool
}

// get returns an idle connection that has not outlived the idle timeout,
// or nil.
func (p *pool) get() *conn {
	p.mu.Lock()
	expired := p.expireLocked(time.Now())
	var c *conn
	if n := len(p.idle); n > 0 {
		c = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
	}
	p.mu.Unlock()
	closeAll(expired)
	return c
}

// put parks c for reuse, or closes it when the pool is full or closed.
func (p *pool) put(c *conn) {
	c.idle = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle) >= p.max {
		p.mu.Unlock()
		c.close()
		return
	}
	p.idle = append(p.idle, c)
	if p.timer == nil {
		p.timer = time.AfterFunc(p.timeout, p.sweep)
	}
	p.mu.Unlock()
}

// flush closes every idle connection. After one pooled connection turned out
// dead, the ones idle even longer are likely dead too (a relay restart).
func (p *pool) flush() {
	p.mu.Lock()
	all := p.idle
	p.idle = nil
	p.mu.Unlock()
	closeAll(all)
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	all := p.idle
	p.idle = nil
	p.mu.Unlock()
	closeAll(all)
}

// sweep closes expired connections in the background, so an idle Mailer
// does not hold the relay's connection slots until the relay times us out.
func (p *pool) sweep() {
	p.mu.Lock()
	now := time.Now()
	expired := p.expireLocked(now)
	p.timer = nil
	if len(p.idle) > 0 && !p.closed {
		p.timer = time.AfterFunc(p.idle[0].idle.Add(p.timeout).Sub(now), p.sweep)
	}
	p.mu.Unlock()
	closeAll(expired)
}

func (p *pool) expireLocked(now time.Time) []*conn {
	i := 0
	for i < len(p.idle) && now.Sub(p.idle[i].idle) >= p.timeout {
		i++
	}
	if i == 0 {
		return nil
	}
	expired := append([]*conn(nil), p.idle[:i]...)
	n := copy(p.idle, p.idle[i:])
	clear(p.idle[n:]) // drop references so closed connections can be collected
	p.idle = p.idle[:n]
	return expired
}

func closeAll(cs []*conn) {
	for _, c := range cs {
		c.close()
	}
}
