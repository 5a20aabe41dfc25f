package main

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/cors"

	ratelimit "github.com/sluicehq/ratelimit/chi"
	"github.com/sluicehq/ratelimit/core"
	"github.com/sluicehq/ratelimit/keyfuncs"
)

// newAPI returns the API that the page at origin calls: GET /items,
// limited to 3 calls a minute per X-API-Key. CORS runs first, so that a
// 429 carries Access-Control-Allow-Origin like any other answer, and it
// exposes the rate-limit fields, so that the page can read them.
func newAPI(base core.Config, origin string) (http.Handler, error) {
	lim, err := newLimiter(base)
	if err != nil {
		return nil, err
	}
	return api(allowPage(origin, ratelimit.ExposedHeaders(ratelimit.HeadersDraft06)), limit(lim)), nil
}

// newLimiter returns the API's limiter, made from base, open when Redis is
// down.
func newLimiter(base core.Config) (*core.Limiter, error) {
	base.Limit, base.FailMode = core.PerMinute(3), core.FailOpen
	return core.New(base)
}

// allowPage returns the CORS middleware that lets the page at origin call
// the API with an X-API-Key and read the response fields exposed.
func allowPage(origin string, exposed []string) func(http.Handler) http.Handler {
	return cors.Handler(cors.Options{
		AllowedOrigins: []string{origin},
		AllowedHeaders: []string{"X-API-Key"},
		ExposedHeaders: exposed,
	})
}

// limit returns lim's middleware, keyed by X-API-Key. A preflight never
// carries that header (browsers send none of a call's own headers on a
// preflight), and the middleware lets it through undecided.
func limit(lim *core.Limiter) func(http.Handler) http.Handler {
	return ratelimit.Middleware(lim, ratelimit.WithKey(keyfuncs.Header("X-API-Key")))
}

// api returns the API's router with middlewares in the order given.
func api(middlewares ...func(http.Handler) http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Use(middlewares...)
	r.Get("/items", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "[]") })
	return r
}

// call is one of the page's calls as its JavaScript saw it.
type call struct {
	Status     int     `json:"status"`     // 0 when fetch rejected
	Error      string  `json:"error"`      // the rejection's name ("TypeError"), else ""
	RetryAfter *string `json:"retryAfter"` // nil when absent or not readable
	Remaining  *string `json:"remaining"`  // RateLimit-Remaining; nil likewise
}

// newPage returns the page's site. GET / is a page whose script calls the
// API at apiURL six times, shows what it could read of each answer and
// posts the calls to /results, which hands them to report.
func newPage(apiURL string, report func([]call)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		if err := page.Execute(w, apiURL); err != nil {
			http.Error(w, "page: "+err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("POST /results", func(w http.ResponseWriter, r *http.Request) {
		var calls []call
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&calls); err != nil {
			http.Error(w, "results: "+err.Error(), http.StatusBadRequest)
			return
		}
		report(calls)
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// page calls the API at {{.}}. Each call has a URL of its own, so that the
// browser sends a preflight before every call (it caches one per URL for
// 5 s when Access-Control-Max-Age is absent): none of them costs a token.
var page = template.Must(template.New("page").Parse(`<!doctype html>
<meta charset="utf-8">
<title>ratelimit from a browser</title>
<h1>Six calls to an API limited to 3 a minute</h1>
<table id="calls"><tr><th>call</th><th>status</th><th>Retry-After</th><th>RateLimit-Remaining</th></tr></table>
<script>
const api = {{.}};

async function call(i) {
  try {
    const r = await fetch(api + "/items?call=" + i, {headers: {"X-API-Key": "demo-key"}});
    return {status: r.status, error: "", retryAfter: r.headers.get("Retry-After"),
            remaining: r.headers.get("RateLimit-Remaining")};
  } catch (e) {
    return {status: 0, error: e.name, retryAfter: null, remaining: null};
  }
}

(async () => {
  const calls = [];
  for (let i = 1; i <= 6; i++) {
    const c = await call(i);
    calls.push(c);
    const row = document.getElementById("calls").insertRow();
    for (const v of [i, c.error || c.status, c.retryAfter, c.remaining]) {
      row.insertCell().textContent = v === null ? "null" : v;
    }
  }
  await fetch("/results", {method: "POST", headers: {"Content-Type": "application/json"},
                           body: JSON.stringify(calls)});
})();
</script>
`))

// String returns what JavaScript read of c, "null" for what it could not:
// "429 Retry-After=20 RateLimit-Remaining=0", or "TypeError".
func (c call) String() string {
	if c.Error != "" {
		return c.Error
	}
	return fmt.Sprintf("%d Retry-After=%s RateLimit-Remaining=%s", c.Status, orNull(c.RetryAfter), orNull(c.Remaining))
}

// orNull returns *s, or "null" when s is nil.
func orNull(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}
