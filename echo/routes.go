package echo

import "github.com/labstack/echo/v4"

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
