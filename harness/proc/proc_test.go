package proc

import "testing"

// A stack asks for the ports of all its children before any of them binds: two children must
// never be given the same one.
func TestFreePortNeverHandsOutAPortTwice(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 2000; i++ {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice (call %d)", port, i+1)
		}
		seen[port] = true
	}
}
