package dlockadmin_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/dlockadmin"
)

// Posts to /unlock without the admin token store no notice: 256 of them
// (one curl loop) do not push an operator's result out of the store before
// the redirect or a reload shows it. Refusals before authentication carry
// fixed text and need no server-side slot.
func TestUnauthenticatedPostsDoNotEvictOperatorNotice(t *testing.T) {
	e := setup(t, dlockadmin.WithForceUnlock(adminSecret))
	l := acquire(t, e.c, "job:evict")
	noFollow := *e.ts.Client()
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	post := func(form url.Values) string {
		req, _ := http.NewRequest("POST", e.ts.URL+"/unlock", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", e.ts.URL)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("Location")
	}
	loc := post(url.Values{"name": {"job:evict"}, "fence": {strconv.FormatInt(l.Fence(), 10)}, "admin_token": {adminSecret}})
	for range 256 {
		post(url.Values{"name": {"x"}, "fence": {"1"}}) // no token
	}
	if _, body, _ := e.do(t, "GET", strings.TrimPrefix(loc, "."), nil, nil); !strings.Contains(body, `class="box ok"`) {
		t.Errorf("the operator's unlock result is gone after 256 posts without a token")
	}
}
