package bucket

import "errors"

// The errors a malformed request is refused with. Package core exports
// them under the same names (core.ErrEmptyKey, …): they are its errors,
// defined here so that the checks can live beside the arithmetic.
var (
	ErrEmptyKey      = errors.New("core: empty key")
	ErrInvalidCost   = errors.New("core: cost must be at least 1")
	ErrCostTooHigh   = errors.New("core: cost exceeds the bucket capacity (Burst) and could never be allowed")
	ErrInvalidLimit  = errors.New("core: invalid limit")
	ErrInvalidConfig = errors.New("core: invalid config")
)
