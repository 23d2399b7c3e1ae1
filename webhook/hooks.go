package webhook

// hooks let white-box tests stop or slow the pipeline at the points the
// design's tests lock. All nil outside tests.
type hooks struct {
	beforeDispatch   func(outboxID string)       // each outbox row: in dispatch before its transaction, in a claim after the fan-out
	beforeAttempt    func(deliveryID string)     // each HTTP attempt, before the request
	beforeMark       func(deliveryID string)     // each attempt's mark, before it is written
	afterFanOut      func(outboxID string) error // inside the fan-out tx, before commit
	afterReplayClone func(cloneIDs []string) error
}
