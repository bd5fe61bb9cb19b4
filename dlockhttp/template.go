package dlockhttp

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode"

	"github.com/dlock-go/dlock"
)

// ParseTemplate parses a lock name template, for names kept in
// configuration: literal text with fields "{source.key}", where source is
//
//   - path: the ServeMux wildcard key (r.PathValue), a Go identifier;
//   - header: the request header key (r.Header.Get), a header field name;
//   - query: the query parameter key (r.URL.Query().Get), any text without
//     braces.
//
// For example "order:{path.orderId}:{header.X-User-Id}". The template is
// parsed once; the NameFunc it returns only fills in values. A field whose
// value the request lacks (absent or empty) makes the NameFunc fail with a
// *MissingValueError naming the field, which the middleware answers with
// 400.
//
// Braces only delimit fields: there is no escape for a literal brace, so a
// stray one is reported rather than taken as text. A template without
// fields names one lock for every request (one report run at a time, say).
//
// The error is a *TemplateError that tells where the template is wrong.
func ParseTemplate(tmpl string) (NameFunc, error) {
	t, err := parseTemplate(tmpl)
	if err != nil {
		return nil, err
	}
	return t.name, nil
}

// MustParseTemplate is ParseTemplate for templates known when the program is
// written; it panics on an invalid template.
func MustParseTemplate(tmpl string) NameFunc {
	f, err := ParseTemplate(tmpl)
	if err != nil {
		panic(err)
	}
	return f
}

// TemplateError reports an invalid lock name template.
type TemplateError struct {
	Template string // the whole template
	Offset   int    // bytes of Template before the error
	Reason   string // what is wrong, quoting the field
}

func (e *TemplateError) Error() string {
	return fmt.Sprintf("dlockhttp: lock name template %q: at offset %d: %s", e.Template, e.Offset, e.Reason)
}

// template is a parsed template: literal text and fields, in order.
type template struct {
	parts    []part
	hasQuery bool // parse the query once per request, only when needed
}

// part is literal text (source == "") or a field.
type part struct {
	text   string // the literal, or the field's key
	source string
}

func parseTemplate(s string) (*template, error) {
	fail := func(off int, format string, args ...any) error {
		return &TemplateError{Template: s, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	if s == "" {
		return nil, fail(0, "empty template: a lock name cannot be empty")
	}
	t := &template{}
	literal := 0
	// Each turn consumes literal text up to the next brace, then one field;
	// every turn advances i, so the loop ends after at most len(s) turns.
	for i := 0; i < len(s); {
		j := strings.IndexAny(s[i:], "{}")
		if j < 0 {
			j = len(s) - i
		}
		if j > 0 {
			t.parts = append(t.parts, part{text: s[i : i+j]})
			literal += j
			i += j
			continue
		}
		if s[i] == '}' {
			return nil, fail(i, `unexpected "}": braces only delimit fields such as {path.id}`)
		}
		end := strings.IndexAny(s[i+1:], "{}")
		if end < 0 || s[i+1+end] == '{' {
			return nil, fail(i, `unclosed "{": a field is {source.key}`)
		}
		field := s[i+1 : i+1+end]
		p, err := parseField(field)
		if err != "" {
			return nil, fail(i, "field %q: %s", "{"+field+"}", err)
		}
		t.parts = append(t.parts, p)
		t.hasQuery = t.hasQuery || p.source == SourceQuery
		i += end + 2
	}
	if literal > dlock.MaxNameLength {
		return nil, fail(0, "literal text is %d bytes, above the longest lock name (%d)", literal, dlock.MaxNameLength)
	}
	return t, nil
}

// parseField checks "source.key" and returns why it is invalid, if it is.
func parseField(field string) (part, string) {
	if field == "" {
		return part{}, "empty field: write {source.key}"
	}
	source, key, ok := strings.Cut(field, ".")
	if !ok {
		return part{}, fmt.Sprintf("no source: write {path.%[1]s}, {header.%[1]s} or {query.%[1]s}", field)
	}
	if key == "" {
		return part{}, fmt.Sprintf("empty key: write {%s.name}", source)
	}
	switch source {
	case SourcePath:
		if !isIdentifier(key) {
			return part{}, fmt.Sprintf("path key %q is not a wildcard name (a Go identifier, as in the ServeMux pattern)", key)
		}
	case SourceHeader:
		if !isToken(key) {
			return part{}, fmt.Sprintf("header key %q is not a valid header field name", key)
		}
		// Canonical once here, so Header.Get does not redo it per request.
		key = http.CanonicalHeaderKey(key)
	case SourceQuery:
		// Any key: the braces that would end the field were excluded above.
	default:
		return part{}, fmt.Sprintf("unknown source %q: want path, header or query", source)
	}
	return part{text: key, source: source}, ""
}

// name fills in the template for one request.
func (t *template) name(r *http.Request) (string, error) {
	var query url.Values
	if t.hasQuery {
		query = r.URL.Query()
	}
	var b strings.Builder
	for _, p := range t.parts {
		v := p.text
		switch p.source {
		case SourcePath:
			v = r.PathValue(p.text)
		case SourceHeader:
			v = r.Header.Get(p.text)
		case SourceQuery:
			v = query.Get(p.text)
		}
		if v == "" && p.source != "" {
			return "", &MissingValueError{Source: p.source, Key: p.text}
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// isIdentifier reports whether s is a Go identifier, the rule ServeMux
// applies to wildcard names: a name it would refuse can never have a value.
func isIdentifier(s string) bool {
	for i, c := range s {
		if !unicode.IsLetter(c) && c != '_' && (i == 0 || !unicode.IsDigit(c)) {
			return false
		}
	}
	return s != ""
}

// isToken reports whether s is an HTTP token (RFC 9110 section 5.6.2), the
// syntax of header field names.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return s != ""
}
