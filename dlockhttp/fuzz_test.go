package dlockhttp

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseTemplate feeds arbitrary templates to the parser. Whatever the
// input: no panic; an error is a *TemplateError pointing inside the
// template; a template that parses gives, for a request carrying every
// field, the literal text with each field's value in its place, and for a
// request carrying none of them a *MissingValueError.
//
// The plain `go test` run tries the seeds only; fuzz with
// go test -fuzz=FuzzParseTemplate -fuzztime=30s ./dlockhttp/
func FuzzParseTemplate(f *testing.F) {
	for _, seed := range []string{
		"order:{path.orderId}:{header.X-User-Id}",
		"{query.x}",
		"report",
		"", "{", "}", "{}", "{.}", "{path.}", "{.id}", "{path.a}{", "{path.a}}",
		"a{{path.b}}", "{path.a.b}", "{header.a:b}", "{query.{}", "{query.a b}",
		"{path.ключ}", "{path.\xff}", "{header.\x00}", "x\x00{query.\xfe}y",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, err := parseTemplate(s)
		if err != nil {
			var te *TemplateError
			if !errors.As(err, &te) || te.Offset < 0 || te.Offset > len(s) || te.Template != s {
				t.Fatalf("parseTemplate(%q): error %#v is not a *TemplateError inside the template", s, err)
			}
			_ = err.Error()
			return
		}
		full := httptest.NewRequest("GET", "/", nil)
		query := url.Values{}
		var want strings.Builder
		fields := 0
		for _, p := range tm.parts {
			value := "v" // no braces: the name must not look like a template
			switch p.source {
			case "":
				if strings.ContainsAny(p.text, "{}") {
					t.Fatalf("parseTemplate(%q): literal %q holds a brace", s, p.text)
				}
				value = p.text
			case SourcePath:
				full.SetPathValue(p.text, value)
			case SourceHeader:
				full.Header.Set(p.text, value)
			case SourceQuery:
				query.Set(p.text, value)
			default:
				t.Fatalf("parseTemplate(%q): unknown source %q", s, p.source)
			}
			if p.source != "" {
				fields++
			}
			want.WriteString(value)
		}
		full.URL.RawQuery = query.Encode()
		name, err := tm.name(full)
		if err != nil || name != want.String() || name == "" {
			t.Fatalf("template %q with every field set: %q, %v; want %q", s, name, err, want.String())
		}
		if fields > 0 {
			_, err := tm.name(httptest.NewRequest("GET", "/", nil))
			if !errors.Is(err, ErrMissingValue) {
				t.Fatalf("template %q with no field set: %v, want ErrMissingValue", s, err)
			}
		}
	})
}
