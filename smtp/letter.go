package smtp

// Compose returns msg as Send would write it after DATA: the RFC 5322
// message with this Mailer's From, Message-ID domain and headers. It
// touches no connection; it is for previews (`worker templates render`)
// that must show exactly what the relay would be handed. Its errors are
// Send's permanent ones.
func (m *Mailer) Compose(msg Message) ([]byte, error) {
	l, err := m.compose(msg)
	return l.data, err
}
