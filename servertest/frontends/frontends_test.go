package frontends_test

import (
	"testing"

	"github.com/ratelimit-go/ratelimit/servertest/storetest"
	"github.com/ratelimit-go/ratelimit/servertest/testserver"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// The layers work through every front end, on both clients: a near cache
// behind Multi and httplimit, several keys in one script.
func TestFrontEnds(t *testing.T) {
	for _, c := range storetest.Clients {
		t.Run(c.Name, func(t *testing.T) { storetest.FrontEnds(t, c.Kind, c.New) })
	}
}

// Several policies on keys of several hash tags of a cluster, through
// Multi: a script per tag, sent at once, each decision observed once.
func TestMultiApartOnACluster(t *testing.T) {
	for _, c := range storetest.Clients {
		t.Run(c.Name, func(t *testing.T) { storetest.MultiApart(t, testserver.GetCluster(t, c.Cluster).Addrs, c.NewCluster) })
	}
}
