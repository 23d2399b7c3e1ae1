// Package setting reads the worker's number settings (RETRY_BACKOFF_SCALE,
// OTEL_TRACES_SAMPLER_ARG) against the interval each accepts.
//
// An Interval is written as the configuration reference writes it ("(0, 1]")
// so a refusal quotes the same range the page does, and Number refuses NaN
// and the infinities as well as what falls outside: strconv.ParseFloat
// accepts all three, and a check written as "x < lo or x > hi" lets NaN
// through, since every comparison with it is false.
package setting
