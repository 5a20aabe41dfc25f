package echo

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// routes lists the routes of c's Echo, for nethttp.Chain.Routes, or says
// that the middleware runs in e.Pre. c.Path() is empty both before
// routing and for a request no route matches: routing the request once
// more tells which.
func routes(c echo.Context) ([]string, string, bool) {
	e, r := c.Echo(), c.Request()
	if c.Path() == "" {
		router := e.Router()
		if hr, ok := e.Routers()[r.Host]; ok {
			router = hr
		}
		probe := e.NewContext(r, nil)
		router.Find(r.Method, echo.GetPath(r), probe)
		if probe.Path() == "" {
			return nil, "", false // a 404 tells nothing: ask again
		}
		return nil, "the middleware runs in e.Pre, before echo routes the request (c.Path() is empty): give it to e.Use", true
	}
	return echoRoutes(e), "", true
}

// echoRoutes lists e's routes and its host routers', "METHOD path" each.
func echoRoutes(e *echo.Echo) []string {
	list := []string{}
	add := func(rs []*echo.Route) {
		for _, rt := range rs {
			if rt.Method != echo.RouteNotFound {
				list = append(list, rt.Method+" "+rt.Path)
			}
		}
	}
	add(e.Routes())
	for _, router := range e.Routers() {
		add(router.Routes())
	}
	return list
}

// noOptionsRoute reports, for nethttp.Chain.NoOptionsRoute, that no route
// of c's Echo serves OPTIONS at the request's path: no route matches it,
// or the route matched has no OPTIONS handler (Any registers one), so
// echo answers it itself (404, 405 or its automatic OPTIONS reply). A
// RouteNotFound handler at the path is the app's: it serves.
func noOptionsRoute(c echo.Context) bool {
	e, r := c.Echo(), c.Request()
	router := e.Router()
	if hr, ok := e.Routers()[r.Host]; ok {
		router = hr
	}
	path := c.Path()
	if path == "" { // before routing (e.Pre), or no route: route it to tell
		probe := e.NewContext(r, nil)
		router.Find(r.Method, echo.GetPath(r), probe)
		if path = probe.Path(); path == "" {
			return true
		}
	}
	for _, rt := range router.Routes() {
		if rt.Path == path && (rt.Method == http.MethodOptions || rt.Method == echo.RouteNotFound) {
			return false
		}
	}
	return true
}
