package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// mitText is a license go-licenses recognises as MIT.
const mitText = `MIT License

Copyright (c) 2026 Example

Permission is hereby granted, free of charge, to any person obtaining
a copy of this software and associated documentation files (the
"Software"), to deal in the Software without restriction, including
without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to
permit persons to whom the Software is furnished to do so, subject to
the following conditions:

The above copyright notice and this permission notice shall be
included in all copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND,
EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF
MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE
LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION
OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION
WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
`

// wtfplText is a recognised license that is not on the allowed list.
const wtfplText = `            DO WHAT THE FUCK YOU WANT TO PUBLIC LICENSE
                    Version 2, December 2004

 Copyright (C) 2004 Sam Hocevar <sam@hocevar.net>

 Everyone is permitted to copy and distribute verbatim or modified
 copies of this license document, and changing it is allowed as long
 as the name is changed.

            DO WHAT THE FUCK YOU WANT TO PUBLIC LICENSE
   TERMS AND CONDITIONS FOR COPYING, DISTRIBUTION AND MODIFICATION

  0. You just DO WHAT THE FUCK YOU WANT TO.
`

// TestLicenses_RefusesWhatIsNotAllowed runs scripts/licenses on a small
// module whose one dependency carries the license under test: an allowed
// one passes, while a recognised license off the list, an unrecognised
// text and no license at all each fail, naming the dependency.
func TestLicenses_RefusesWhatIsNotAllowed(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs("licenses")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		license string // the dependency's LICENSE; empty: none
		wantOK  bool
	}{
		{"allowed (MIT)", mitText, true},
		{"not allowed (WTFPL)", wtfplText, false},
		{"unrecognised", "Proprietary. All rights reserved; no copying.\n", false},
		{"none", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			write := func(name, content string) {
				t.Helper()
				path := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("app/go.mod", "module example.com/app\n\ngo 1.26\n\nrequire example.com/dep v0.0.0\n\nreplace example.com/dep => ../dep\n")
			write("app/main.go", "package main\n\nimport \"example.com/dep\"\n\nfunc main() { println(dep.Hello()) }\n")
			write("app/LICENSE", mitText)
			write("dep/go.mod", "module example.com/dep\n\ngo 1.26\n")
			write("dep/dep.go", "package dep\n\nfunc Hello() string { return \"hello\" }\n")
			if tt.license != "" {
				write("dep/LICENSE", tt.license)
			}
			cmd := exec.Command(script, filepath.Join(dir, "app"))
			// -trimpath, as the mutation runner sets it, must not blind
			// go-licenses (the script builds it without).
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-trimpath")
			out, err := cmd.CombinedOutput()
			if tt.wantOK && err != nil {
				t.Fatalf("scripts/licenses refused an allowed license: %v\n%s", err, out)
			}
			if !tt.wantOK {
				if err == nil {
					t.Fatalf("scripts/licenses passed a dependency it must refuse:\n%s", out)
				}
				if !strings.Contains(string(out), "example.com/dep") || !strings.Contains(string(out), "license") {
					t.Errorf("the refusal does not name the dependency's license:\n%s", out)
				}
			}
		})
	}
}
