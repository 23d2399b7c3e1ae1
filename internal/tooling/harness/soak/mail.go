package soak

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"net/textproto"
	"strings"
	"sync"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/postbox/postbox/internal/operator/devserver/smtpsink"
)

// mailFaults is the sink's fault model. It decides per delivery attempt
// (per DATA), except for the permanent rows, which are chosen when the load
// is generated and answered 550 on every attempt — so "failed rows are
// exactly those given permanent errors" is checkable.
type mailFaults struct {
	faults Faults

	mu        sync.Mutex
	rng       *rand.Rand
	permanent map[string]bool // chosen at enqueue
	attempts  map[string]int  // DATA commands seen, per row
	answered  map[string]int  // 550s given, per row
	transient int             // 451s given
	hung      int             // replies held
	hungRows  map[string]bool // rows with a held reply: possibly delivered, so failed
	unknown   int             // DATA without a row id in its Message-ID
}

func newMailFaults(f Faults, seed uint64) *mailFaults {
	return &mailFaults{
		faults:    f,
		rng:       rand.New(rand.NewPCG(seed, 0x6d61696c)),
		permanent: map[string]bool{},
		attempts:  map[string]int{},
		answered:  map[string]int{},
		hungRows:  map[string]bool{},
	}
}

// setPermanent records the rows that always get 550. It is called before
// the rows are committed, so no attempt can see a row before its verdict.
func (m *mailFaults) setPermanent(ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		m.permanent[id] = true
	}
}

func (m *mailFaults) options() smtpsink.Options {
	return smtpsink.Options{Hang: m.hang, Fault: m.fault, DiscardData: true}
}

// hang is called first for every DATA: it counts the attempt and decides
// whether to hold the reply. A permanent row is never held, so its first
// attempt fails it.
func (m *mailFaults) hang(env smtpsink.Envelope) bool {
	id := envelopeRowID(env.Data)
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == "" {
		m.unknown++
		return false
	}
	m.attempts[id]++
	if m.permanent[id] || m.rng.Float64() >= m.faults.SMTPHang {
		return false
	}
	m.hung++
	m.hungRows[id] = true
	return true
}

// fault answers the attempts that were not held: 550 for a permanent row,
// else 451 with probability SMTPTransient, else nil (accepted).
//
// An accepted message is recorded by the sink whether or not the sender is
// still there to read the 250: the sink has read the whole message before
// Fault runs, and records it when Fault returns nil. ReplyDelay, slept
// here, is the window in which a sender can die after its message was
// accepted.
func (m *mailFaults) fault(env smtpsink.Envelope) error {
	if err := m.verdict(envelopeRowID(env.Data)); err != nil {
		return err
	}
	time.Sleep(m.faults.ReplyDelay)
	return nil
}

func (m *mailFaults) verdict(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.permanent[id] {
		m.answered[id]++
		return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "soak: no such mailbox"}
	}
	// Rescale so that SMTPTransient is a share of all attempts, not of
	// the ones that were not held.
	if p := m.faults.SMTPTransient / (1 - m.faults.SMTPHang); m.rng.Float64() < p {
		m.transient++
		return &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "soak: try again later"}
	}
	return nil
}

// envelopeRowID is the outbox row id postbox puts in the Message-ID's left
// half (smtpsink.Received.RowID does the same for accepted messages).
func envelopeRowID(data []byte) string {
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(data))).ReadMIMEHeader()
	if err != nil && len(h) == 0 {
		return ""
	}
	id, ok := strings.CutPrefix(strings.TrimSpace(h.Get("Message-Id")), "<")
	if !ok {
		return ""
	}
	id = strings.TrimSuffix(id, ">")
	if i := strings.LastIndexByte(id, '@'); i >= 0 {
		return id[:i]
	}
	return ""
}
