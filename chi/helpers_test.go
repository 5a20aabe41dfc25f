package chi_test

import "time"

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
