# syntax=docker/dockerfile:1
# Multi-stage build: a static worker binary on a distroless non-root base.
#
# Images are pinned by exact tag. To pin by digest as well, look the
# digest up and append it (FROM image:tag@sha256:…):
#   docker buildx imagetools inspect golang:1.26.8-bookworm --format '{{json .Manifest.Digest}}'
#   docker buildx imagetools inspect gcr.io/distroless/static-debian12:nonroot --format '{{json .Manifest.Digest}}'
# (distroless publishes no version tags, so its digest is the only exact pin.)
#
# A release build stamps its version into the binary (worker version):
#   docker build --build-arg VERSION=v1.4.0 --build-arg REVISION=$(git rev-parse HEAD) .
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=
ARG REVISION=
# .git is not in the build context (.dockerignore), so the toolchain cannot
# stamp a VCS revision itself: VERSION and REVISION do.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
	-ldflags="-s -w -X github.com/postbox/postbox/internal/engine/version.stamp=${VERSION} -X github.com/postbox/postbox/internal/engine/version.stampRevision=${REVISION}" \
	-o /out/worker ./cmd/worker

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /usr/local/bin/worker
USER nonroot:nonroot
ENV HTTP_ADDR=:8080
EXPOSE 8080
# distroless has no shell or curl: the binary checks itself. Ready means
# the database answers and migrations are current (/readyz).
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
	CMD ["/usr/local/bin/worker", "healthcheck"]
# Docker's default stop signal; the worker then drains for SHUTDOWN_TIMEOUT
# (30 s), cancels what is left (up to 15 s) and closes its HTTP server (5 s),
# so give it 60 s before the kill (compose: stop_grace_period; docker stop
# -t 60; Kubernetes: terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/worker"]
CMD ["run"]
