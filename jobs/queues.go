package jobs

import (
	"strconv"
	"strings"
)

// QueueMaintenance is where the leader's periodic passes run (the webhook
// retry pass, the pruner), apart from any replica's shifts.
const QueueMaintenance = "postbox_maintenance"

// maxQueueName is River's limit on a queue name.
const maxQueueName = 64

// ReplicaQueue is the River queue of one replica's shifts: only that
// replica works it, so every replica runs its own lanes. id is the
// replica's River client ID (host-pid); the name keeps what River allows
// of it (lower-case letters and digits, single underscores) and ends with
// the pid, so it stays unique when a long host name is cut.
func ReplicaQueue(host string, pid int) string {
	var b strings.Builder
	sep := true
	for _, r := range strings.ToLower(host) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			sep = false
		} else if !sep {
			b.WriteByte('_')
			sep = true
		}
	}
	tail := "_" + strconv.Itoa(pid)
	name := strings.TrimRight(b.String(), "_")
	const prefix = "postbox_r_"
	if room := maxQueueName - len(prefix) - len(tail); len(name) > room {
		name = strings.TrimRight(name[:room], "_")
	}
	if name == "" {
		name = "host"
	}
	return prefix + name + tail
}
