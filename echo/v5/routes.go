package echo

import "github.com/labstack/echo/v5"

// routes lists the routes of c's Echo, for nethttp.Chain.Routes, or says
// that the middleware runs in e.Pre. c.Path() is empty both before
// routing and for a request no route matches; only after routing does
// c.RouteInfo() carry a name (echo.NotFoundRouteName for a 404).
func routes(c *echo.Context) ([]string, string, bool) {
	if c.Path() == "" {
		if c.RouteInfo().Name != "" {
			return nil, "", false // a 404 tells nothing: ask again
		}
		return nil, "the middleware runs in e.Pre, before echo routes the request (c.Path() is empty): give it to e.Use", true
	}
	return echoRoutes(c.Echo()), "", true
}

// echoRoutes lists the routes of e.Router(), "METHOD path" each ("path"
// for every method).
func echoRoutes(e *echo.Echo) []string {
	list := []string{}
	for _, rt := range e.Router().Routes() {
		switch rt.Method {
		case echo.RouteNotFound:
		case echo.RouteAny:
			list = append(list, rt.Path) // every method
		default:
			list = append(list, rt.Method+" "+rt.Path)
		}
	}
	return list
}

// noOptionsRoute reports, for nethttp.Chain.NoOptionsRoute, that echo
// routed the request to none of the app's handlers: no route matches it
// (404), or the route matched has no OPTIONS handler, so echo answers
// itself (405, or its automatic OPTIONS reply). Before routing (e.Pre) it
// cannot tell: false.
func noOptionsRoute(c *echo.Context) bool {
	switch c.RouteInfo().Name {
	case echo.NotFoundRouteName, echo.MethodNotAllowedRouteName:
		return true
	}
	return false
}
