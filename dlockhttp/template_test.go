package dlockhttp_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockhttp"
)

func TestTemplateNames(t *testing.T) {
	req := httptest.NewRequest("POST", "/orders/42?region=eu-west&empty=", nil)
	req.SetPathValue("orderId", "42")
	req.SetPathValue("ключ", "k")
	req.Header.Set("X-User-Id", "u7")
	for _, tc := range []struct{ tmpl, want string }{
		{"order:{path.orderId}", "order:42"},
		{"order:{path.orderId}:{header.X-User-Id}", "order:42:u7"},
		{"{header.x-user-id}", "u7"}, // header keys are case-insensitive
		{"{query.region}/{path.orderId}", "eu-west/42"},
		{"{path.ключ}", "k"}, // ServeMux takes Unicode identifiers
		{"nightly-report", "nightly-report"},
		{"{path.orderId}{path.orderId}", "4242"},
	} {
		f, err := dlockhttp.ParseTemplate(tc.tmpl)
		if err != nil {
			t.Errorf("ParseTemplate(%q): %v", tc.tmpl, err)
			continue
		}
		if got, err := f(req); err != nil || got != tc.want {
			t.Errorf("%q gives %q, %v; want %q", tc.tmpl, got, err, tc.want)
		}
	}
}

func TestTemplateMissingValues(t *testing.T) {
	req := httptest.NewRequest("POST", "/x?empty=", nil)
	for _, tc := range []struct{ tmpl, source, key string }{
		{"order:{path.orderId}", "path", "orderId"},
		{"a{header.x-tenant}", "header", "X-Tenant"},
		{"{query.empty}", "query", "empty"},
		{"{query.absent}", "query", "absent"},
	} {
		_, err := dlockhttp.MustParseTemplate(tc.tmpl)(req)
		var missing *dlockhttp.MissingValueError
		if !errors.As(err, &missing) || !errors.Is(err, dlockhttp.ErrMissingValue) ||
			missing.Source != tc.source || missing.Key != tc.key {
			t.Errorf("%q: got %v, want a missing %s value %q", tc.tmpl, err, tc.source, tc.key)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, tc := range []struct {
		tmpl   string
		offset int
		reason string
	}{
		{"", 0, "empty template"},
		{"order:{path.orderId", 6, `unclosed "{"`},
		{"order:{path.a{path.b}", 6, `unclosed "{"`},
		{"order:}", 6, `unexpected "}"`},
		{"a:{paht.id}", 2, `field "{paht.id}": unknown source "paht": want path, header or query`},
		{"a:{PATH.id}", 2, `unknown source "PATH"`},
		{"a:{ path.id}", 2, `unknown source " path"`},
		{"a:{}", 2, "empty field"},
		{"a:{orderId}", 2, "no source: write {path.orderId}"},
		{"a:{path.}", 2, "empty key: write {path.name}"},
		{"a:{path.order-id}", 2, `path key "order-id" is not a wildcard name`},
		{"a:{path.1st}", 2, `path key "1st"`},
		{"a:{header.X User}", 2, `header key "X User" is not a valid header field name`},
		{"x:{query.q}" + strings.Repeat("x", dlock.MaxNameLength), 0, "literal text is 514 bytes"},
	} {
		_, err := dlockhttp.ParseTemplate(tc.tmpl)
		var te *dlockhttp.TemplateError
		if !errors.As(err, &te) {
			t.Errorf("ParseTemplate(%q) = %v, want a *TemplateError", tc.tmpl, err)
			continue
		}
		if te.Offset != tc.offset || !strings.Contains(te.Reason, tc.reason) || te.Template != tc.tmpl {
			t.Errorf("ParseTemplate(%q): offset %d, reason %q; want offset %d, reason with %q", tc.tmpl, te.Offset, te.Reason, tc.offset, tc.reason)
		}
		if !strings.Contains(err.Error(), "dlockhttp: lock name template") {
			t.Errorf("error text %q lacks the package prefix", err)
		}
	}
}

func TestMustParseTemplatePanics(t *testing.T) {
	defer func() {
		if _, ok := recover().(*dlockhttp.TemplateError); !ok {
			t.Error("MustParseTemplate did not panic with a *TemplateError")
		}
	}()
	dlockhttp.MustParseTemplate("{bad")
}
