// Package prometheus holds no code: its directory carries postbox's
// Prometheus alerting rules (postbox-alerts.yml) and their promtool unit
// tests, and its Go test keeps them checked and their metric names real.
package prometheus
