# Worker and enqueue images: static binaries, and ffmpeg, which the worker
# runs for everything but WAV: MP3 and FLAC (faster than the Go decoders,
# which serve without it) and the formats with no Go decoder (Ogg/Opus,
# M4A/AAC, WebM, AMR...).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/worker ./cmd/enqueue

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ffmpeg ca-certificates \
  && rm -rf /var/lib/apt/lists/* && useradd --system --uid 65532 --no-create-home nonroot
COPY --from=build /out/worker /out/enqueue /usr/local/bin/
USER 65532
EXPOSE 9100
ENTRYPOINT ["/usr/local/bin/worker"]
