// Package grafana holds no code: its directory carries postbox's Grafana
// dashboard (postbox.json), and its Go test keeps the dashboard's queries
// on metrics the code registers and on every metric the alert rules read.
package grafana
