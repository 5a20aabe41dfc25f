package gin

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// routes lists the routes of the engine serving c, for
// nethttp.Chain.Routes. A gin.Context does not give its engine away: it
// is found as the Handler of the http.Server serving the request. A
// request served otherwise (a test calling ServeHTTP, an engine wrapped in
// another handler) lists nothing, and nothing is checked: CheckRoutes
// checks those.
func routes(c *gin.Context) ([]string, string, bool) {
	srv, _ := c.Request.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil {
		return nil, "", true
	}
	engine, _ := srv.Handler.(*gin.Engine)
	if engine == nil {
		return nil, "", true
	}
	return engineRoutes(engine), "", true
}

// engineRoutes lists e's routes, "METHOD path" each.
func engineRoutes(e *gin.Engine) []string {
	list := []string{}
	for _, rt := range e.Routes() {
		list = append(list, rt.Method+" "+rt.Path)
	}
	return list
}
