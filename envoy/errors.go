package envoy

import "errors"

// Errors of this package, for errors.Is.
var (
	// ErrConfig wraps every reason a configuration is refused.
	ErrConfig = errors.New("envoy: invalid rate limit config")
	// ErrUsageUnsupported refuses a usage limit (rate_limit.usage: true)
	// while the Service has no Charge function to take usage as debt.
	ErrUsageUnsupported = errors.New("usage limits (rate_limit.usage) are not yet supported by this build")
)
