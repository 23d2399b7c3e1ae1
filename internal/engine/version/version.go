// Package version is the worker's build identity: a release stamp set at
// link time, else what the Go toolchain recorded (module version, VCS
// revision). `worker version` prints it; a build-info metric can label
// with it.
//
// A release build stamps it with
//
//	go build -ldflags "-X github.com/postbox/postbox/internal/engine/version.stamp=v1.4.0 \
//	  -X github.com/postbox/postbox/internal/engine/version.stampRevision=$(git rev-parse HEAD)" ./cmd/worker
//
// (the Dockerfile does, from its VERSION and REVISION build arguments).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X; empty in an ordinary build.
var (
	stamp         string
	stampRevision string
)

// Info is what the binary knows about its own build.
type Info struct {
	Version   string `json:"version"`            // the release stamp, else the module version, else "devel"
	Revision  string `json:"revision,omitempty"` // VCS revision, when known
	Time      string `json:"time,omitempty"`     // VCS commit time (RFC3339), when known
	Modified  bool   `json:"modified,omitempty"` // the working tree had uncommitted changes
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// Get reads the build information.
func Get() Info {
	info := Info{Version: "devel", Revision: stampRevision, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Revision == "" {
					info.Revision = s.Value
				}
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if stamp != "" {
		info.Version = stamp
	}
	return info
}

// String is one line: "v1.4.0 (revision 0123abcd…, 2026-05-01T10:00:00Z) go1.26.0 linux/amd64".
func (i Info) String() string {
	s := i.Version
	var detail string
	if i.Revision != "" {
		detail = "revision " + i.Revision
		if i.Modified {
			detail += "+modified"
		}
	}
	if i.Time != "" {
		if detail != "" {
			detail += ", "
		}
		detail += i.Time
	}
	if detail != "" {
		s += " (" + detail + ")"
	}
	return fmt.Sprintf("%s %s %s", s, i.GoVersion, i.Platform)
}
