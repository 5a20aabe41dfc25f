package nethttp

// HasRoutes reports whether WithRoutes gave g any route override. An
// adapter whose router knows the route pattern only at a cost (chi, in a
// middleware that runs before routing, has to match the route once more)
// asks it once, at construction, and passes "" to DecideRoute when false.
func (g *Gate) HasRoutes() bool { return g.routes != nil }
