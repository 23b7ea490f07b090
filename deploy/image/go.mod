// imagebuild, the controller image's builder (deploy/image/build runs it;
// deploy/local/build builds it): a module of its own, so that
// go-containerregistry does not move the control plane's dependencies. The
// CA bundle is the pinned x509roots module's: bump it to update the roots.
module shardcron.local/image

go 1.26.7

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/klauspost/compress v1.19.2
	golang.org/x/crypto/x509roots/fallback v0.0.0-20261030153154-30a33513ff6d
)

require (
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
