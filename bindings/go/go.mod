module tensorhub.dev/tensorhub

go 1.19
