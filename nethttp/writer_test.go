package nethttp

import "net/http"

// discardWriter is a ResponseWriter that keeps the status and body and whose
// header map can be reused, so benchmarks measure the middleware alone.
type discardWriter struct {
	h      http.Header
	status int
	body   []byte
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, b...)
	return len(b), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.status = 0
	w.body = w.body[:0]
}
