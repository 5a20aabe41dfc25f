package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"
)

// debugServer is the reference's debug listener (DEBUG_HOST:DEBUG_PORT,
// 6070): /rlconfig prints the config in force in the reference's format
// (nothing before the first), /debug/pprof/ profiles, / lists them. A
// port it cannot listen on is logged, as there, and serving goes on.
func debugServer(host string, port int, st *state, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, r *http.Request) {
		if c := st.current(); c != nil {
			io.WriteString(w, c.String())
		}
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "/debug/pprof/: root of various pprof endpoints. hit for help.\n"+
			"/rlconfig: print out the currently loaded configuration for debugging\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("debug listener failed; serving goes on without it", "addr", addr, "err", err)
		return srv
	}
	go srv.Serve(lis)
	return srv
}
