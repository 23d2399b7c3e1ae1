package outbox

// hooks let white-box tests inject failures at the points the
// panic isolation is about. All nil outside tests.
type hooks struct {
	decode    func(*Row)          // before each claimed row's decode
	beforeRow func(*Row)          // in the batch's loop, before each row's attempt
	record    func(*Row, *Result) // before each row's mark
}
