# syntax=docker/dockerfile:1
# Multi-stage build: a static worker binary on a distroless non-root base.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/worker ./cmd/worker

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /usr/local/bin/worker
USER nonroot:nonroot
ENV HTTP_ADDR=:8080
EXPOSE 8080
# distroless has no shell or curl: the binary checks itself.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
	CMD ["/usr/local/bin/worker", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/worker"]
CMD ["run"]
