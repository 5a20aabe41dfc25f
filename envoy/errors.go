package envoy

import "errors"

// errConfig wraps every reason a configuration is refused, for errors.Is.
var errConfig = errors.New("envoy: invalid rate limit config")
