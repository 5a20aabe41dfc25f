package grpc

import (
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/sluicehq/ratelimit/core"
)

// splitMethod splits a full method name "/pkg.Service/Method" into its
// service and method, reporting whether it has that form: a leading
// slash, two non-empty parts without spaces or further slashes.
func splitMethod(full string) (service, method string, ok bool) {
	rest, found := strings.CutPrefix(full, "/")
	if !found {
		return "", "", false
	}
	service, method, found = strings.Cut(rest, "/")
	if !found || service == "" || method == "" || strings.ContainsAny(method, "/") ||
		strings.ContainsAny(full, " \t\r\n") {
		return "", "", false
	}
	return service, method, true
}

// checkMethods checks the WithMethods names against the protobuf
// registry: it panics on a method that a registered service does not
// have, and returns the services the registry does not know, sorted (nil
// when none).
func checkMethods(methods map[string]*core.Limiter) []string {
	var unknown []string
	for full := range methods {
		service, method, _ := splitMethod(full) // checked by WithMethods
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
		if err != nil {
			if !slices.Contains(unknown, service) {
				unknown = append(unknown, service)
			}
			continue
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok {
			panic("grpc: WithMethods: " + strconv.Quote(full) + ": " + service + " is not a service")
		}
		if sd.Methods().ByName(protoreflect.Name(method)) == nil {
			var have []string
			for i := range sd.Methods().Len() {
				have = append(have, string(sd.Methods().Get(i).Name()))
			}
			panic("grpc: WithMethods: " + strconv.Quote(full) + ": service " + service +
				" has no method " + method + " (it has " + strings.Join(have, ", ") + ")")
		}
	}
	slices.Sort(unknown)
	return unknown
}
