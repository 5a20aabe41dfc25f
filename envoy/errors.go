package envoy

import "errors"

// ErrConfig wraps every reason a configuration is refused, for errors.Is.
var ErrConfig = errors.New("envoy: invalid rate limit config")
