module github.com/queuebox/queuebox

go 1.26
