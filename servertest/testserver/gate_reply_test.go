package testserver

import "testing"

// A store's reading of the server's clock (TIME) once waited at a held gate
// in place of the decision a test meant to hold (the nearcache overtaken
// denial test, in CI under load).
func TestGateHoldsOnlyDecisionReplies(t *testing.T) {
	for reply, want := range map[string]bool{
		"$40\r\n0123456789":                           true,  // one request's, packed
		"*10\r\n:1\r\n:5\r\n":                         true,  // several's
		"*2\r\n$10\r\n1764290000\r\n$6\r\n123456\r\n": false, // TIME
		"%7\r\n$6\r\nserver\r\n":                      false, // a handshake
		"+PONG\r\n":                                   false,
		"-ERR no\r\n":                                 false,
	} {
		if got := decisionReply([]byte(reply)); got != want {
			t.Errorf("decisionReply(%q) = %v, want %v", reply, got, want)
		}
	}
}
