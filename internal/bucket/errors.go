package bucket

// A Fault is why a store refuses an Ask (one no store may decide: see
// Check) or could not answer it. Package core reports each as its error
// of the same name (core.ErrEmptyKey for EmptyKey, …), where users meet
// them: this package and the Redis transport return only these, bare or
// wrapped with details, and core's stores translate them.
type Fault uint8

// The faults.
const (
	EmptyKey      Fault = iota + 1 // an empty subject
	InvalidCost                    // a cost below 1 (or beyond a part's bucket)
	CostTooHigh                    // a cost no bucket of the policies could ever hold
	InvalidLimit                   // a policy whose numbers leave the exact range
	InvalidConfig                  // a malformed request: no policies, parts not matching them
	Overloaded                     // too many store decisions in flight: no call was made
	BadReply                       // a store's reply that does not read as an answer
)

// Error says what f is, in the words of core's error without its
// "core: " prefix.
func (f Fault) Error() string { return faultWords[f] }

var faultWords = [...]string{
	0:             "no fault",
	EmptyKey:      "empty key",
	InvalidCost:   "cost must be at least 1",
	CostTooHigh:   "cost exceeds the bucket capacity (Burst) and could never be allowed",
	InvalidLimit:  "invalid limit",
	InvalidConfig: "invalid config",
	Overloaded:    "too many store decisions in flight",
	BadReply:      "unexpected reply from store",
}
