package dlockhttp

import (
	"errors"
	"fmt"
	"net/http"
)

// A NameFunc derives the lock name of a request. An error means the request
// names no lock; the middleware answers it with 400 Bad Request (see
// WithInvalidNameStatus) and does not run the handler. A NameFunc runs on
// every request, before anything is sent to Redis: keep it cheap.
type NameFunc func(r *http.Request) (string, error)

// ErrMissingValue matches the error of a NameFunc when the request lacks a
// value the name is made of. The concrete error is a *MissingValueError.
var ErrMissingValue = errors.New("dlockhttp: missing value")

// Sources of a value in a lock name: the words of a template field
// "{source.key}" and of MissingValueError.Source.
const (
	SourcePath   = "path"   // r.PathValue(key), a wildcard of the ServeMux pattern
	SourceHeader = "header" // r.Header.Get(key)
	SourceQuery  = "query"  // r.URL.Query().Get(key)
	SourceRoute  = "route"  // r.Pattern, the ServeMux pattern that matched (Route)
)

// MissingValueError reports a value a lock name needs and the request lacks
// (absent or empty). It matches ErrMissingValue. Its text names the field,
// so the middleware's default 400 answer tells the client what to send.
type MissingValueError struct {
	Source string // SourcePath, SourceHeader or SourceQuery
	Key    string // the wildcard, header or parameter name
}

func (e *MissingValueError) Error() string {
	if e.Source == SourceRoute {
		return "dlockhttp: missing route pattern: the lock is named after the ServeMux pattern that matched the request (Route), and no ServeMux routed it"
	}
	what := map[string]string{
		SourcePath:   "path value",
		SourceHeader: "header",
		SourceQuery:  "query parameter",
	}[e.Source]
	if what == "" {
		what = e.Source
	}
	return fmt.Sprintf("dlockhttp: missing %s %q (lock name field {%s.%s})", what, e.Key, e.Source, e.Key)
}

// Is makes errors.Is(err, ErrMissingValue) true.
func (e *MissingValueError) Is(target error) bool { return target == ErrMissingValue }

// PathValue names the lock prefix + r.PathValue(key): the wildcard key of
// the route's ServeMux pattern, as in
//
//	mux.Handle("POST /orders/{orderId}", dlockhttp.MustMiddleware(locker, dlockhttp.PathValue("order:", "orderId"))(h))
//
// The prefix keeps names of different kinds apart ("order:42" is not
// "user:42"). A route without that wildcard gives a *MissingValueError.
func PathValue(prefix, key string) NameFunc {
	return valueName(prefix, SourcePath, key, (*http.Request).PathValue)
}

// Route names the lock prefix + the ServeMux pattern that matched the
// request (r.Pattern, such as "POST /reports/rebuild"): one request of the
// route at a time, whatever its values, for work that must not overlap
// itself (a rebuild, an import):
//
//	mux.Handle("POST /reports/rebuild", dlockhttp.MustMiddleware(locker, dlockhttp.Route("route:"))(h))
//
// A request that no ServeMux routed (r.Pattern empty: another router, or
// the handler called directly) gives a *MissingValueError, not one lock
// shared by every such request.
func Route(prefix string) NameFunc {
	return func(r *http.Request) (string, error) {
		if r.Pattern == "" {
			return "", &MissingValueError{Source: SourceRoute, Key: "Pattern"}
		}
		return prefix + r.Pattern, nil
	}
}

// Header names the lock prefix + the request header key (its first value).
// An absent or empty header gives a *MissingValueError. See the package
// documentation on names that the client chooses.
func Header(prefix, key string) NameFunc {
	key = http.CanonicalHeaderKey(key)
	return valueName(prefix, SourceHeader, key, func(r *http.Request, k string) string { return r.Header.Get(k) })
}

// Query names the lock prefix + the query parameter key (its first value).
// An absent or empty parameter gives a *MissingValueError. See the package
// documentation on names that the client chooses.
func Query(prefix, key string) NameFunc {
	return valueName(prefix, SourceQuery, key, func(r *http.Request, k string) string { return r.URL.Query().Get(k) })
}

func valueName(prefix, source, key string, get func(*http.Request, string) string) NameFunc {
	return func(r *http.Request) (string, error) {
		v := get(r, key)
		if v == "" {
			// An empty value would lock prefix alone: one lock shared by every
			// request that forgot the value, which is a client bug, not a name.
			return "", &MissingValueError{Source: source, Key: key}
		}
		return prefix + v, nil
	}
}
