package version

import "github.com/prometheus/client_golang/prometheus"

// Collector is postbox_build_info: always 1, labelled with what Get
// reports, so a dashboard can tell which build each replica runs and an
// alert can catch a pool that is half upgraded.
func Collector() prometheus.Collector {
	info := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "postbox_build_info",
		Help: "The running build: version, VCS revision and Go version. Always 1.",
		ConstLabels: prometheus.Labels{
			"version": info.Version, "revision": info.Revision, "go_version": info.GoVersion,
		},
	})
	g.Set(1)
	return g
}
