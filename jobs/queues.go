package jobs

// River queues. Email and webhook work get their own queues so a slow
// webhook receiver never delays an invoice email, and periodic housekeeping
// never competes with either.
const (
	QueueEmail       = "postbox_email"
	QueueWebhook     = "postbox_webhook"
	QueueMaintenance = "postbox_maintenance"
)
