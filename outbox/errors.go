package outbox

import "errors"

// Sentinel errors callers branch on.
var (
	// ErrNotCancellable is matched (errors.Is) by a *CancelRefusedError:
	// Cancel refused a row that is not pending, or is being sent now.
	ErrNotCancellable = errors.New("outbox: only a pending email that is not being sent can be cancelled")

	// ErrInvalid is matched (errors.Is) by every *ValidationError.
	ErrInvalid = errors.New("outbox: invalid email")

	// ErrStaleMark is matched (errors.Is) by the error of a mark whose row was
	// no longer pending: its lease expired and a sibling resolved it, or an
	// operator did. The mark was not applied. It is expected under crashes and
	// slow sends, so the dispatcher logs and counts it instead of failing.
	ErrStaleMark = errors.New("outbox: stale mark")

	// ErrSkip, returned (or wrapped) by a Renderer, marks the row skipped: not
	// sent, not failed, payload scrubbed. Use it for emails that became moot
	// between enqueue and send (an invoice paid before its reminder went out).
	ErrSkip = errors.New("outbox: renderer skipped the email")

	// ErrNotFound is matched (errors.Is) when no email_outbox row has the id.
	ErrNotFound = errors.New("outbox: no such email")

	// ErrNotFailed is matched (errors.Is) by a *NotFailedError: Requeue
	// refused a row that is not failed.
	ErrNotFailed = errors.New("outbox: only a failed email can be requeued")

	// ErrSuppressed is matched (errors.Is) by the failure of a row whose
	// recipient is in email_suppressions. It is permanent: the row fails at
	// once (status failed, not skipped: the email was wanted and did not go,
	// and an operator who lifts the suppression can requeue it) with the
	// suppression's reason as last_error.
	ErrSuppressed = errors.New("recipient is suppressed")

	// ErrNotSuppressed is returned by LiftSuppression for an address that is
	// not on the list.
	ErrNotSuppressed = errors.New("outbox: address is not suppressed")
)
