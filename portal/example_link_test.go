package portal_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/postbox/postbox/portal"
)

// The application's own page for its signed-in customer "acme" mints a
// link and redirects the browser to postbox's address with it
// (http.Redirect(w, r, "https://hooks.example.com"+link, http.StatusSeeOther)).
func ExampleLink() {
	key := []byte("the current PORTAL_SIGNING_KEY, 32 bytes or more")
	link, err := portal.Link(key, "acme", 5*time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.HasPrefix(link, "/portal/open?token="))
	// Output: true
}
